"""The family's benchmark table and plot (`measure.family`), from bench results as `tritonllm-course bench
--config` writes them (the measurement itself needs a GPU): each size's newest folder found, its bytes from
its own byte model, the fastest Triton level named."""
import json

import pytest

from tritonllm_course import cli
from tritonllm_course.config import FAMILY, get_config
from tritonllm_course.measure import engine_bench
from tritonllm_course.measure import family


def _bench(folder, size, ms_fast, ms_ops, date="2026-01-02"):
    rows = [engine_bench.Row(family.BEST, prefill_ms=2.0, decode_ms={128: ms_fast, 2048: ms_fast, 4096: ms_fast * 1.1},
                      ttft_ms={128: 2.0, 2048: 20.0, 4096: 40.0}, kernels=138),
            engine_bench.Row(engine_bench.OPERATORS + engine_bench.GRAPH, prefill_ms=3.0, decode_ms={128: ms_ops}),
            engine_bench.Row("transformers static + compile", error="skipped: the run's time budget of 1 s was spent")]
    result = {"gpu": "Test GPU", "date": date, "dtype": "bfloat16", "model": "random", "config": size,
              **engine_bench.byte_model(get_config(size)), "versions": "torch x", "prompt_len": 128,
              "contexts": [128, 2048, 4096], "steps": 16, "repeats": 2, "ceiling_gbps": 4000.0,
              "rows": [engine_bench.asdict(r) for r in rows]}
    folder.mkdir(parents=True)
    (folder / "bench.json").write_text(json.dumps(result))


def test_collect_reads_each_sizes_newest_bench_and_names_the_fastest_level(tmp_path):
    _bench(tmp_path / "engine_test-gpu_2026-01-01", "qwen3.5-0.8b", 9.0, 9.5, date="2026-01-01")
    _bench(tmp_path / "engine_test-gpu_2026-01-02", "qwen3.5-0.8b", 0.65, 0.95)
    _bench(tmp_path / "engine_qwen3.5-27b_test-gpu_2026-01-02", "qwen3.5-27b", 17.6, 14.2)
    fam = family.collect(tmp_path)
    assert list(fam["sizes"]) == ["qwen3.5-0.8b", "qwen3.5-27b"]
    small, big = fam["sizes"].values()
    assert small["decode_ms"][family.BEST][128] == 0.65            # the newer of the two 0.8B folders
    assert big["bytes"][128] > 30 * small["bytes"][128]              # each size's own bytes
    assert family.best_triton(big, 128) == (engine_bench.OPERATORS + engine_bench.GRAPH, 14.2)
    md = family.markdown(fam)
    pct = 100 * big["bytes"][128] / 14.2e-3 / 1e9 / 4000.0
    assert f"operators 14.200 ({pct:.0f}%)" in md and "| 2.0 / 20.0 |" in md
    path = family.write(fam, tmp_path)
    assert path.exists() and path.with_suffix(".png").stat().st_size > 10_000


def test_the_command_line_takes_each_size_and_refuses_a_config_beside_a_checkpoint(capsys, tmp_path):
    parser = cli.build_parser()
    for size in FAMILY:
        assert parser.parse_args(["bench", "--config", size]).config == size
        generate = ["generate", "--config", size, "--model", "random", "--prompt-ids", "1"]
        assert parser.parse_args(generate).config == size
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--config", "qwen3.5-3b"])
    capsys.readouterr()
    assert cli.main(["bench", "--config", "qwen3.5-4b", "--model", str(tmp_path)]) == 2
    assert "brings its own config" in capsys.readouterr().err


@pytest.mark.parametrize("budget", ["0", "-1", "nan"])
def test_the_family_refuses_a_budget_before_any_size_runs(capsys, monkeypatch, budget):
    monkeypatch.setattr(family, "run_size", lambda *a, **k: pytest.fail("a size ran"))
    assert family.main(["--budget-s", budget]) == 2
    assert "--budget-s must be above 0" in capsys.readouterr().err
