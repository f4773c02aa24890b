"""`@triton.jit` helpers shared by the solutions (imported, never copied).

All take and return fp32 blocks: the kernels cast to fp32 right after loading.
"""
import triton
import triton.language as tl


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def silu(x):
    return x * sigmoid(x)


@triton.jit
def softplus(x):
    # log(1 + e^x), without overflow for large x (PyTorch's threshold is 20)
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def tanh(x):
    # tl.math.tanh is not available under the CPU interpreter
    return 2.0 * sigmoid(2.0 * x) - 1.0


@triton.jit
def l2_normalize_rows(x, eps):
    # x [R, D] -> each row divided by sqrt(sum(row^2) + eps): the DeltaNet L2 norm of q and k
    return x * tl.rsqrt(tl.sum(x * x, axis=1) + eps)[:, None]
