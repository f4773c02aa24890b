"""Swapping an op into the reference model: a faithful op keeps the tokens, a wrong one is caught."""
import sys

import pytest

from tritonllm_course import reference as R
from tritonllm_course.config import PRESETS
from tritonllm_course.model import qwen35
from tritonllm_course.runtime import runtime
from tritonllm_course.swap import compare_greedy, swapped

ORIGINAL = R.rms_norm


def test_faithful_op_passes_and_wrong_op_fails():
    assert compare_greedy({"rms_norm": lambda x, weight, eps=1e-6: ORIGINAL(x, weight, eps)},
                          verbose=False).passed
    report = compare_greedy({"rms_norm": lambda x, weight, eps=1e-6: ORIGINAL(x, weight - 0.3, eps)},
                            verbose=False)
    assert not report.passed and "FAIL" in str(report)


def test_swap_is_undone_and_reaches_composite_ops():
    def spy(gate, up):
        return gate * up
    original_swiglu = R.swiglu
    mlp_module = sys.modules["tritonllm_course.reference.mlp"]   # the package's `mlp` is the function
    with swapped(swiglu=spy):
        assert qwen35.R.swiglu is spy
        assert mlp_module.swiglu is spy          # the MLP's own call site sees the kernel too
    assert R.swiglu is original_swiglu and mlp_module.swiglu is original_swiglu


def test_unknown_op_is_named():
    with pytest.raises(KeyError, match="no reference op named"):
        with swapped(not_an_op=lambda: None):
            pass


@pytest.mark.parametrize("kwargs, error, says", [
    ({"ops": {"rms_norm": 3}}, TypeError, "rms_norm=3 is not callable"),
    ({"prompt_len": -3}, ValueError, "prompt_len must be a whole number >= 1, got -3"),
    ({"seed": "x"}, ValueError, "seed must be a whole number >= 0, got 'x'"),
    ({"n_new": 2.5}, ValueError, "n_new must be a whole number >= 0, got 2.5"),
    ({"prompt_len": "past"}, ValueError, "more than the model's")])
def test_a_bad_argument_is_named_before_the_model_runs(kwargs, error, says):
    """A negative prompt length was torch's 'negative dimension', a string seed torch's manual_seed error, a
    number in place of a kernel 'int object is not callable' from inside the model. "past": one position more
    than the model runs at (the tiny preset's on the CPU, the real model's on a GPU)."""
    kwargs = {"ops": {}, **kwargs}
    if kwargs.get("prompt_len") == "past":
        kwargs["prompt_len"] = PRESETS[runtime().preset].max_position_embeddings - 7     # + the 8 new tokens
    with pytest.raises(error) as e:
        compare_greedy(kwargs.pop("ops"), verbose=False, **kwargs)
    assert says in str(e.value)
