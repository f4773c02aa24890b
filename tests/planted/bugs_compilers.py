"""Planted bugs of chapter 28_compilers's GEMM with a fused GELU epilogue: the tile's offsets, the epilogue, both GELU
forms (the walk along K is chapter 05_projections's `linear_tile`, planted in bugs_projections.py).
The tiny shapes give the interpreter's 64 x 64 x 64 tiles 2 x 8 programs and three K steps, the last partial
(slots/gemm_epilogue.py); the pre-activations are N(0, 1), where a wrong constant shows."""
from planted import Bug

GEMM = [
    Bug("gemm_gelu", "gemm_epilogue", "no program offset along N",
        (("rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", "rn = tl.arange(0, BLOCK_N)"),)),
    Bug("gemm_gelu", "gemm_epilogue", "no program offset along M",
        (("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", "rm = tl.arange(0, BLOCK_M)"),)),
    # the walk along K is chapter 05_projections's `linear_tile` (its bugs are bugs_projections.py's): here the tile's
    # offsets and the epilogue on its finished sums
    Bug("gemm_gelu.tanh", "gemm_epilogue", "the epilogue applied twice",
        (("y = activation(acc, ACT)", "y = activation(activation(acc, ACT), ACT)"),)),
    Bug("gemm_gelu", "gemm_epilogue", "the output's row stride is K",
        (("y_ptrs = y_ptr + rm[:, None].to(tl.int64) * N + rn[None, :]",
          "y_ptrs = y_ptr + rm[:, None].to(tl.int64) * K + rn[None, :]"),)),
    Bug("gemm_gelu.tanh", "gemm_epilogue", "no activation in the epilogue",
        (("y = activation(acc, ACT)", "y = acc"),)),
]

GELU = [
    Bug("gemm_gelu", "gemm_epilogue", "erf of x, not of x / sqrt(2)",
        (("tl.math.erf(x * 0.7071067811865476)", "tl.math.erf(x)"),)),
    Bug("gemm_gelu", "gemm_epilogue", "erf's argument multiplied by sqrt(2)",
        (("tl.math.erf(x * 0.7071067811865476)", "tl.math.erf(x * 1.4142135623730951)"),)),
    Bug("gemm_gelu.tanh", "gemm_epilogue", "the cubic's coefficient 0.44715",
        (("(x + 0.044715 * x * x * x)", "(x + 0.44715 * x * x * x)"),)),
    Bug("gemm_gelu.tanh", "gemm_epilogue", "the cubic's coefficient 0.0044715",
        (("(x + 0.044715 * x * x * x)", "(x + 0.0044715 * x * x * x)"),)),
    Bug("gemm_gelu.tanh", "gemm_epilogue", "sqrt(pi / 2) for sqrt(2 / pi)",
        (("u = 0.7978845608028654 * (x", "u = 1.2533141373155001 * (x"),)),
    Bug("gemm_gelu.tanh", "gemm_epilogue", "2 / pi for sqrt(2 / pi)",
        (("u = 0.7978845608028654 * (x", "u = 0.6366197723675814 * (x"),)),
    Bug("gemm_gelu.tanh", "gemm_epilogue", "sigmoid(u) for 0.5 * (1 + tanh(u))",
        (("return x * sigmoid(2.0 * u)", "return x * sigmoid(u)"),)),
    # the edge "large pre-activations": e^2u overflows fp32 past u ~ 44 (x ~ 10), and inf / inf is NaN
    Bug("gemm_gelu.tanh", "gemm_epilogue", "tanh written as (e^2u - 1) / (e^2u + 1)",
        (("return x * sigmoid(2.0 * u)",
          "e = tl.exp(2.0 * u)\n    return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0))"),)),
]

BUGS = GEMM + GELU
