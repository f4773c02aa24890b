"""Swapping an op into the reference model: a faithful op keeps the tokens, a wrong one is caught."""
import sys

import pytest

from tritonllm_course import reference as R
from tritonllm_course.model import qwen35
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
