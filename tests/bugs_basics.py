"""Planted bugs of chapters 01 and 04: the vector add and the RMSNorms."""
from planted import Bug

BUGS = [
    Bug("vector_add", "vector_add", "no program offset",
        (("offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)", "offsets = tl.arange(0, BLOCK_SIZE)"),)),
    Bug("vector_add", "vector_add", "no mask on the tail",
        (("x = tl.load(x_ptr + offsets, mask=mask)", "x = tl.load(x_ptr + offsets)"),
         ("y = tl.load(y_ptr + offsets, mask=mask)", "y = tl.load(y_ptr + offsets)"),
         ("tl.store(out_ptr + offsets, x + y, mask=mask)", "tl.store(out_ptr + offsets, x + y)")),
        out_of_bounds=True),
    Bug("vector_add", "vector_add", "a grid one block short",
        (("grid = (triton.cdiv(n, block_size),)", "grid = (n // block_size,)"),)),
    Bug("ln1", "rmsnorm", "no eps",
        (("tl.rsqrt(tl.sum(x * x, axis=1) / dim + eps)", "tl.rsqrt(tl.sum(x * x, axis=1) / dim)"),)),
    Bug("ln1", "rmsnorm", "no fp32 cast of x",
        (("mask=mask, other=0.0).to(tl.float32)", "mask=mask, other=0.0)"),)),
    Bug("ln1", "rmsnorm", "w instead of 1 + w",
        (("y = x * inv_rms[:, None] * (1.0 + w)[None, :]", "y = x * inv_rms[:, None] * w[None, :]"),)),
    Bug("ln1", "rmsnorm", "mean over the padded block, not the row",
        (("tl.sum(x * x, axis=1) / dim + eps", "tl.sum(x * x, axis=1) / BLOCK_D + eps"),)),
    Bug("ln2", "rmsnorm", "no program offset",
        (("r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)", "r = tl.arange(0, BLOCK_M)"),)),
    Bug("qk_norm", "rmsnorm", "the token stride ignored (packed rows assumed)",
        (("x_row = (r // heads) * stride_t + (r % heads) * stride_h", "x_row = r * dim"),)),
    Bug("qk_norm", "rmsnorm", "the head stride ignored",
        (("x_row = (r // heads) * stride_t + (r % heads) * stride_h",
          "x_row = (r // heads) * stride_t + (r % heads) * dim"),)),
]
