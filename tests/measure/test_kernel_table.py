"""The kernel table (tritonllm_course/measure/kernel_table.py) on the CPU: its rows survive a round trip through
the JSON it writes (a table resumed over several GPU calls), and a --resume file that is not such a table, or
was measured elsewhere, is refused in one line with exit 2 before any work."""
import json

import pytest

from tritonllm_course.measure import kernel_table as KT
from tritonllm_course.measure.benchmark import MAX_AUTOTUNE_LABEL, BenchResult


def _result():
    return BenchResult("linear", {"M": 1, "N": 1024, "K": 2048}, "torch.bfloat16", 4_200_000, 4_194_304, 4260.0,
                       "NVIDIA H200", {"triton": 2.9, "torch eager": 13.0, "torch.compile": 12.8,
                                       MAX_AUTOTUNE_LABEL: 3.5}, {"other": "RuntimeError: x"})


def test_a_row_survives_the_json_round_trip():
    r = _result()
    back = BenchResult.from_dict(json.loads(json.dumps(r.as_dict())))
    assert back == r and back.as_dict() == r.as_dict()
    assert KT.markdown([back], "NVIDIA H200", "2026-12-05") == KT.markdown([r], "NVIDIA H200", "2026-12-05")


def test_resume_keeps_the_rows_of_the_same_gpu_and_setting(tmp_path):
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "max_autotune": True, "results": [_result().as_dict()]}))
    assert KT._resumed(str(path), "NVIDIA H200", True) == [_result()]
    assert KT._resumed(None, "NVIDIA H200", True) == []


@pytest.mark.parametrize("content, why", [
    ("{not json", "not a kernel table"),
    (json.dumps({"gpu": "NVIDIA H200"}), "not a kernel table"),
    (json.dumps({"gpu": "Tesla T4", "max_autotune": True, "results": []}), "measured on Tesla T4"),
    (json.dumps({"gpu": "NVIDIA H200", "max_autotune": False, "results": []}), "max_autotune=False"),
])
def test_resume_refuses_another_table_in_one_line(tmp_path, capsys, content, why):
    path = tmp_path / "kernels.json"
    path.write_text(content)
    with pytest.raises(SystemExit) as e:
        KT._resumed(str(path), "NVIDIA H200", True)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "--resume" in err[0] and why in err[0]


def test_a_missing_resume_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        KT._resumed(str(tmp_path / "absent.json"), "NVIDIA H200", True)
    assert e.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_max_autotune_is_not_tried_where_the_slot_rules_it_out_and_the_table_says_so():
    from tritonllm_course import slots
    from tritonllm_course.measure.benchmark import max_autotune_refusal
    chunked = slots.get("gated_delta_chunked")
    short, long = chunked.shapes["real"]
    assert max_autotune_refusal(chunked, short) is None
    why = max_autotune_refusal(chunked, long)
    assert why.startswith("not tried at T = 1024: ") and "500 s" in why
    assert max_autotune_refusal(slots.get("lm_head"), slots.get("lm_head").shapes["real"][0]) is None
    r = _result()
    del r.times_us[MAX_AUTOTUNE_LABEL]
    r.failed[MAX_AUTOTUNE_LABEL] = why
    row = KT.markdown([r], "NVIDIA H200", "2026-12-06").splitlines()[4]
    assert "| not tried |" in row and "| failed |" not in row
