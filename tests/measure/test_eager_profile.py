"""Chapter 02_inside_qwen35's profile of eager PyTorch (tritonllm_course/measure/eager_profile.py): every reference
operator a decode step calls is counted as often as the model's layers call it, the labels are undone after,
and on a GPU the kernels a token launches keep the GPU busy for less than the token's wall time."""
import pytest

import tritonllm_course
from tritonllm_course import reference as R
from tritonllm_course.measure import eager_profile as E
from tritonllm_course.model import Qwen35Model


def test_each_reference_operator_is_counted_once_a_call_and_the_labels_are_undone():
    rt = tritonllm_course.runtime()
    config = rt.config
    model = Qwen35Model.random(config, dtype=rt.dtype, device=rt.device, seed=0)
    before = {name: getattr(R, name) for name in E.REFERENCE_OPS}
    result = E.profile_decode(model, steps=2, prompt_len=4)
    assert {name: getattr(R, name) for name in E.REFERENCE_OPS} == before
    calls = {name: op["calls"] for name, op in result["per_op"].items()}
    deltanet, attention = len(config.linear_layers), len(config.attention_layers)
    assert calls["gated_delta_rule_recurrent"] == calls["conv1d_decode"] == deltanet
    assert calls["attention"] == calls["kv_cache_write"] == attention
    assert calls["mlp"] == config.num_hidden_layers and calls["embedding"] == calls["lm_head"] == 1
    assert result["context"] == 6 and result["wall_ms"] > 0
    assert all(op["us"] >= 0 for op in result["per_op"].values())
    if rt.on_gpu:
        # every kernel is one launch at least a reference operator's worth: more kernels than operator calls
        assert result["kernels"] > sum(calls.values()) and 0 < result["busy_ms"] < result["wall_ms"]
    else:
        assert result["aten_ops"] > sum(calls.values())
    table = E.table(result)
    assert table.splitlines()[1].split()[0] == next(iter(result["per_op"]))   # the largest time first


def test_the_gpu_script_says_it_needs_a_gpu(tmp_path, capsys):
    if tritonllm_course.runtime().on_gpu:
        pytest.skip("a GPU runs the script (scripts/gpu_extras.sh profile)")
    assert E.main(["--out", str(tmp_path)]) == 1
    assert "needs a GPU" in capsys.readouterr().out and not any(tmp_path.iterdir())
