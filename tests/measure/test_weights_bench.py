"""Decode by weight format (`measure/weights_bench.py`, chapter 31_weight_quant): each row's floor from its own
byte model, tokens called equal only when they are, the table rendered from a record as saved (JSON keys turn
to strings), and the command's refusal on a machine without a GPU."""
import json
import subprocess
import sys

import pytest

from tritonllm_course.config import QWEN35_0_8B
from tritonllm_course.measure import weights_bench as WB
from tritonllm_course.measure.bytes_model import bytes_per_token
from tritonllm_course.measure.engine_bench import byte_model


def test_token_agreement_counts_what_differs():
    assert WB.token_agreement([1, 2, 3], [1, 2, 3]) == {"identical": True, "leading_equal": 3,
                                                         "equal_positions": 3, "tokens": 3}
    diverged = WB.token_agreement([1, 2, 3, 4], [1, 9, 3, 4])
    assert diverged == {"identical": False, "leading_equal": 1, "equal_positions": 3, "tokens": 4}
    assert WB.token_agreement([5, 2], [6, 2])["leading_equal"] == 0


@pytest.mark.parametrize("fmt", ["native", "int8", "fp8"])
def test_floor_is_the_formats_own_bytes(fmt):
    model = byte_model(QWEN35_0_8B, fmt)
    ms = WB.floor_ms(model, 4096, 4000.0)
    assert ms == pytest.approx(bytes_per_token(QWEN35_0_8B, 4096, weight_format=fmt) / 4000e9 * 1e3, rel=1e-12)


def test_8bit_floor_is_about_half_of_bf16():
    native, int8 = (WB.floor_ms(byte_model(QWEN35_0_8B, f), 128, 4000.0) for f in ("native", "int8"))
    assert 0.45 < int8 / native < 0.6


def _record():
    rows = [{"system": WB._row_name("native"), "weights": "native", "decode_ms": {128: 0.5, 4096: 0.6},
             "ttft_ms": {128: 1.5, 4096: 30.0}, "error": ""},
            {"system": WB._row_name("int8"), "weights": "int8", "decode_ms": {128: 0.4, 4096: 0.5},
             "ttft_ms": {128: 1.6, 4096: 31.0}, "error": ""},
            {"system": "transformers eager", "weights": None, "decode_ms": {128: 20.0, 4096: 21.0},
             "ttft_ms": {128: 60.0, 4096: 99.0}, "error": ""},
            {"system": WB._row_name("fp8"), "weights": "fp8", "decode_ms": {}, "ttft_ms": {},
             "error": "failed: RuntimeError: out of memory"}]
    return {"gpu": "NVIDIA H200", "date": "2026-12-05", "versions": "torch x", "contexts": [128, 4096], "steps": 32,
            "repeats": 3, "ceiling_gbps": 4000.0, "bytes": {f: byte_model(QWEN35_0_8B, f) for f in WB.FORMATS},
            "rows": rows, "accuracy": {"formats": {"int8": {"kl_mean": 0.0026, "kl_max": 0.01,
                                                            "top1_agreement_pct": 72.0}}},
            "tokens": {"int8": WB.token_agreement([1, 2, 3], [1, 2, 4])}}


def test_markdown_from_the_saved_record():
    record = _record()
    saved = json.loads(json.dumps(record))          # as read back from the file: keys are strings
    assert WB.markdown(saved) == WB.markdown(record)
    table = WB.markdown(saved)
    floor = WB.floor_ms(record["bytes"]["int8"], 128, 4000.0)
    assert f"| {WB._row_name('int8')} | 0.400 | {100 * floor / 0.4:.0f}% |" in table
    assert "| transformers eager | 20.000 | - |" in table
    assert "failed: RuntimeError: out of memory" in table
    assert "2 of 3 positions equal, the first 2 in a row" in table and "(identical)" not in table


def test_without_a_gpu_one_line_and_exit_1():
    run = subprocess.run([sys.executable, "-m", "tritonllm_course.measure.weights_bench"], capture_output=True,
                         text=True, timeout=300)
    if "skipped" not in run.stderr:
        pytest.skip("a GPU is present: the run itself is measured by scripts/gpu_extras.sh")
    assert run.returncode == 1 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["--steps", "1"], ["--repeats", "0"], ["--contexts", "0"], ["--out", "FILE"]])
def test_bad_arguments_exit_2(argv, capsys, tmp_path):
    (tmp_path / "FILE").write_text("")           # --out naming a file: refused before the run, not after it
    assert WB.main([str(tmp_path / a) if a == "FILE" else a for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("weights_bench: error:")
