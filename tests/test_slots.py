"""Every ready kernel slot against its PyTorch reference: tiny odd shapes under the interpreter on the
CPU, the real Qwen3.5-0.8B shapes on the GPU. Fresh random inputs, poisoned outputs (see checking.py)."""
import pytest
import torch

from tritonllm_course import slots
from tritonllm_course.checking import check
from tritonllm_course.runtime import runtime

RT = runtime()
SHAPES_KEY = "tiny" if RT.preset == "tiny" else "real"
DTYPES = [torch.float32, torch.float16] if RT.interpreted else [torch.bfloat16, torch.float16]
CASES = [pytest.param(s.name, i, id=f"{s.name}-{i}")
         for s in slots.all_slots() if s.ready for i in range(len(s.shapes.get(SHAPES_KEY, [])))]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name,index", CASES)
def test_slot_matches_reference(name, index, dtype):
    slot = slots.get(name)
    if dtype not in slot.extra.get("dtypes", DTYPES):
        pytest.skip(f"{name} does not run in {dtype}")
    report = check(name, "solutions", shape=slot.shape(RT.preset, index), dtype=dtype, verbose=False)
    report.raise_if_failed()


def test_every_ready_slot_has_both_shape_sets():
    for s in slots.all_slots():
        if s.ready:
            assert s.shapes.get("tiny") and s.shapes.get("real"), f"{s.name} lacks tiny or real shapes"
            assert s.reference is not None and s.make_inputs is not None, s.name


def test_catalog_lists_the_21_operators():
    ops = sorted({s.op for s in slots.all_slots() if s.op})   # variants (prefill/decode) share an op
    assert ops == list(range(1, 22))
