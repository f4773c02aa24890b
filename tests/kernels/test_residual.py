"""The residual add beyond the generic slot check: in place on the residual stream, an fp32 stream under
fp16 activations, bit-equality with PyTorch's add, bad input."""
import pytest
import torch

from tritonllm_course import kernels
from tritonllm_course.runtime import runtime
from helpers import randn

RT = runtime()
residual_add = kernels.get("residual", "residual_add", "solutions")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_equals_torch_add_bit_for_bit(dtype):
    """fp32 add, one rounding: exactly what PyTorch does for `residual + x` in a low precision."""
    x, r = randn(5, 77, dtype=dtype), randn(5, 77, dtype=dtype, seed=1)
    assert torch.equal(residual_add(x, r), r + x)


def test_in_place_update_of_the_residual_stream():
    x, r = randn(4, 300), randn(4, 300, seed=1)
    expected = r + x
    out = residual_add(x, r, out=r)
    assert out.data_ptr() == r.data_ptr() and torch.equal(r, expected)


def test_fp32_stream_keeps_what_fp16_loses():
    """fp16 mode: x in fp16, the residual stream in fp32. The sum is fp32 and does not overflow."""
    x = randn(2, 64, dtype=torch.float16, scale=100.0)
    r = randn(2, 64, scale=100.0, seed=1)
    r[0, 0], x[0, 0] = 60000.0, 30000.0                       # fp16 max is 65504
    out = residual_add(x, r)
    assert out.dtype == torch.float32 and torch.equal(out, r + x.float())
    assert torch.isinf(residual_add(x, r.half()))[0, 0]      # the same add in fp16 overflows


def test_one_row_and_a_partial_block():
    x, r = randn(1, 1025), randn(1, 1025, seed=1)
    out = torch.full_like(r, float("nan"))
    residual_add(x, r, out=out)
    assert torch.equal(out, r + x)


def test_bad_input_is_named():
    x = randn(3, 8)
    with pytest.raises(ValueError, match=r"residual has shape \[3, 9\]"):
        residual_add(x, randn(3, 9))
    with pytest.raises(TypeError, match="residual has dtype float16"):
        residual_add(x, randn(3, 8, dtype=torch.float16))
    with pytest.raises(TypeError, match="x has dtype int64"):
        residual_add(torch.ones(3, 8, dtype=torch.int64, device=RT.device), x)
    with pytest.raises(ValueError, match="contiguous"):
        residual_add(randn(8, 3).t(), x)
    with pytest.raises(TypeError, match="out has dtype float16"):
        residual_add(x, x, out=torch.empty(3, 8, dtype=torch.float16, device=RT.device))


@pytest.mark.gpu
def test_bf16_equals_torch_add_on_gpu():
    x, r = randn(128, 1024, dtype=torch.bfloat16), randn(128, 1024, dtype=torch.bfloat16, seed=1)
    assert torch.equal(residual_add(x, r), r + x)
