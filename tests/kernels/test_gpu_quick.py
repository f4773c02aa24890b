"""The quick GPU check's kernel half (scripts/gpu_check.sh quick): every ready slot once, at its first real
shape, in the GPU's dtype and in fp16 (a T4's), one trial, no edge inputs. tests/kernels/test_slots.py runs the full
check (every shape, every edge); this one finds in a minute a kernel that no longer compiles or computes."""
import pytest
import torch

from tritonllm_course import slots
from tritonllm_course.checking import check
from tritonllm_course.runtime import runtime

RT = runtime()
READY = [pytest.param(s.name, id=s.name) for s in slots.all_slots() if s.ready]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", READY)
def test_slot_once_at_a_real_shape(name, dtype):
    slot = slots.get(name)
    if dtype not in slot.dtypes(RT):
        pytest.skip(f"{name} does not run in {dtype}")
    check(name, "solutions", shape=slot.shapes["real"][0], dtype=dtype, trials=1,
          verbose=False).raise_if_failed()
