"""The interpreter's bounds check (tritonllm_course.memcheck), which every CPU test runs under."""
import pytest
import torch

import tritonllm_course

RT = tritonllm_course.runtime()
pytestmark = pytest.mark.skipif(RT.on_gpu, reason="checks the CPU interpreter")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tritonllm_course import memcheck  # noqa: E402


@triton.jit
def _copy(src_ptr, dst_ptr, n, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)
    else:
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


def test_masked_kernel_passes_and_copies():
    src = torch.randn(37)
    dst = torch.full((37,), float("nan"))
    with memcheck.checked():
        _copy[(triton.cdiv(37, 16),)](src, dst, 37, MASKED=True, BLOCK=16)
    assert torch.equal(src, dst)


def test_unmasked_tail_is_named():
    src, dst = torch.randn(37), torch.empty(37)
    with memcheck.checked(), pytest.raises(Exception, match=r"kernel _copy: 11 active lane\(s\) of a load.*src_ptr"):
        _copy[(3,)](src, dst, 37, MASKED=False, BLOCK=16)


def test_a_view_is_its_own_extent():
    """Writing past a view into the rest of its allocation is caught too: the engine's buffers are views."""
    big = torch.zeros(64)
    src, dst = torch.randn(20), big[8:28]
    with memcheck.checked(), pytest.raises(Exception, match="dst_ptr"):
        _copy[(2,)](src.repeat(2)[:32], dst, 20, MASKED=False, BLOCK=16)
    assert torch.all(big[28:] == 0)          # checked before the store: nothing was written past the view


def test_extent_of_strided_views():
    t = torch.zeros(4, 6)
    assert memcheck.extent(t) == (t.data_ptr(), t.data_ptr() + 24 * 4)
    col = t[:, 2]                              # 4 elements, stride 6
    assert memcheck.extent(col) == (col.data_ptr(), col.data_ptr() + (3 * 6 + 1) * 4)
    lo, hi = memcheck.extent(t[:0])
    assert lo == hi                            # an empty view addresses nothing
