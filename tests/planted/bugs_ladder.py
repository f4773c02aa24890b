"""Planted bugs of chapter 29_naive_to_fast's naive projection: the walk along K at the weight's strides."""
from planted import Bug

BUGS = [
    # the row-major shapes have stride_k = 1: only the transposed-storage edge sees the stride dropped
    Bug("naive_gemv", "naive_gemv", "the weight's K stride taken as 1",
        (("k[None, :].to(tl.int64) * stride_k,", "k[None, :].to(tl.int64),"),)),
    Bug("naive_gemv", "naive_gemv", "rows walked at stride K, not the weight's row stride",
        (("row_start = w_ptr + rows.to(tl.int64) * stride_n", "row_start = w_ptr + rows.to(tl.int64) * K"),),
        out_of_bounds=True),
    Bug("naive_gemv", "naive_gemv", "no program offset",
        (("rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)", "rows = tl.arange(0, ROWS)"),)),
    Bug("naive_gemv", "naive_gemv", "the last partial K step dropped",
        (("for k0 in range(0, K, BLOCK_K):", "for k0 in range(0, K - BLOCK_K + 1, BLOCK_K):"),)),
    Bug("naive_gemv", "naive_gemv", "x read at the row's offset",
        (("x = tl.load(x_ptr + k, mask=k_ok", "x = tl.load(x_ptr + k + k0, mask=k_ok"),), out_of_bounds=True),
    Bug("naive_gemv", "naive_gemv", "the lanes' partial sums overwritten, not accumulated",
        (("acc += w * x[None, :]", "acc = w * x[None, :]"),)),
]
