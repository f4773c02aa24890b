"""Every ready kernel slot against its PyTorch reference: tiny odd shapes under the interpreter on the
CPU, the real Qwen3.5-0.8B shapes on the GPU. Fresh random inputs, poisoned outputs (see checking.py)."""
import pytest
import torch

from tritonllm_course import slots
from tritonllm_course.checking import check
from tritonllm_course.runtime import runtime

RT = runtime()
DTYPES = [torch.float32, torch.float16] if RT.interpreted else [torch.bfloat16, torch.float16]
READY = [pytest.param(s.name, id=s.name) for s in slots.all_slots() if s.ready]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name", READY)
def test_slot_matches_reference(name, dtype):
    """The learner's check on the solution: every shape of the mode and every edge input."""
    slot = slots.get(name)
    if dtype not in slot.extra.get("dtypes", DTYPES):
        pytest.skip(f"{name} does not run in {dtype}")
    if (why := slot.not_here(RT)) is not None:
        pytest.skip(why)
    check(name, "solutions", dtype=dtype, verbose=False).raise_if_failed()


def test_every_ready_slot_has_both_shape_sets():
    for s in slots.all_slots():
        if s.ready:
            assert s.shapes.get("tiny") and s.shapes.get("real"), f"{s.name} lacks tiny or real shapes"
            assert s.reference is not None and s.make_inputs is not None, s.name


def test_catalog_lists_the_21_operators():
    ops = sorted({s.op for s in slots.all_slots() if s.op})   # variants (prefill/decode) share an op
    assert ops == list(range(1, 22))


def test_gpu_plan_holds_the_interpreters_plan():
    """On a GPU the check runs the small odd shapes and edges too: the planted bugs are proven on them
    (tests/planted/test_planted_bugs.py, under the interpreter), and the real shapes alone are block-aligned."""
    from tritonllm_course.checking import plan_cases

    for s in slots.all_slots():
        if not s.ready:
            continue
        small = [(shape, edge) for shape, edge, _ in plan_cases(s, "tiny")]
        real = [(shape, edge) for shape, edge, _ in plan_cases(s, "qwen3.5-0.8b")]
        assert all(case in real for case in small), s.name
        assert real[:len(s.all_shapes("real"))] == [(shape, None) for shape in s.all_shapes("real")], s.name


def test_every_declared_shape_is_a_given_shape_unchanged():
    """`check(shape=...)` and `bench(shape=...)` take a slot's own shapes as they are: nothing refused (a 0 or a
    float where another shape has a size is an option's value), no dim added."""
    for s in slots.all_slots():
        for preset, key in (("tiny", "tiny"), ("qwen3.5-0.8b", "real")):
            for shape in s.shapes.get(key, []):
                assert s.given_shape(preset, shape) == shape, (s.name, shape)


def test_bench_shapes_may_name_a_dim_the_slot_lacks():
    """Chapter 31_weight_quant times the per-channel and the per-group GEMV with one shape holding `group`."""
    shape = {"M": 1, "N": 248320, "K": 1024, "group": 128}
    assert slots.get("quant_gemv").given_shape("qwen3.5-0.8b", shape, strict=False) == shape
    with pytest.raises(ValueError, match="quant_gemv has no dim 'group'"):
        slots.get("quant_gemv").given_shape("qwen3.5-0.8b", shape)
