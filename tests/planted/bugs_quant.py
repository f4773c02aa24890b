"""Planted bugs of the 8-bit weight projections (chapter 31_weight_quant): the dequantizing GEMV and GEMM."""
from planted import Bug

_W_LOAD = 'eviction_policy="evict_first").to(tl.float32)'
_ACC = "        acc += q * x[None, :]\n"
_GEMV_SCALE = "s = tl.load(s_ptr + rows.to(tl.int64) * GROUPS + k_step // GROUP, mask=row_ok, other=0.0)"
_GEMV_SPAN_SCALE = "s_ptr + rows.to(tl.int64)[:, None] * GROUPS + (k // GROUP)[None, :],"
_GEMM_SCALE = "s = tl.load(s_ptr + rn.to(tl.int64) * GROUPS + k0 // GROUP, mask=n_ok, other=0.0)"

BUGS = [
    # the GEMV (the learner's kernel)
    Bug("quant_gemv", "quant", "int8 read as uint8 (the sign extension lost)",
        ((_W_LOAD, 'eviction_policy="evict_first").to(tl.uint8, bitcast=True).to(tl.float32)'),)),
    Bug("quant_gemv", "quant", "a zero point of 128 subtracted from symmetric weights",
        ((_ACC, "        acc += (q - 128.0) * x[None, :]\n"),)),
    # each product rounded to fp16 as it joins the lane's sum: the fp32 runs see the rounding
    Bug("quant_gemv", "quant", "accumulation in fp16",
        ((_ACC, "        acc = (acc + q * x[None, :]).to(tl.float16).to(tl.float32)\n"),)),
    # the edge "large activations": the int8 sums pass 65504 before the scale brings them back
    Bug("quant_gemv", "quant", "the row's sum reduced in fp16, before the scale",
        (("    y = tl.sum(acc, axis=1)  ", "    y = tl.sum(acc.to(tl.float16), axis=1).to(tl.float32)  "),)),
    Bug("quant_gemv", "quant", "the per-channel scale never applied",
        (("        y = y * tl.load(s_ptr + rows, mask=row_ok, other=0.0)\n", "        y = y\n"),)),
    Bug("quant_gemv.group", "quant", "the scales read as [groups, N] (the wrong axis)",
        ((_GEMV_SCALE, "s = tl.load(s_ptr + (k_step // GROUP) * N + rows, mask=row_ok, other=0.0)"),)),
    Bug("quant_gemv.group", "quant", "the group index off by one",
        ((_GEMV_SCALE, _GEMV_SCALE.replace("k_step // GROUP", "k_step // GROUP + 1")),), out_of_bounds=True),
    # K = 509 and 131 in groups of 32 end in a partial group (29 and 3 columns)
    Bug("quant_gemv.group", "quant", "the last partial K group dropped",
        (("for k_step in range(0, K, BLOCK_K):", "for k_step in range(0, K // GROUP * GROUP, BLOCK_K):"),)),
    # K = 2085 takes steps over several groups: each column's scale, gathered
    Bug("quant_gemv.group", "quant", "steps over several groups: the scales read as [groups, N]",
        ((_GEMV_SPAN_SCALE, "s_ptr + (k // GROUP)[None, :] * N + rows.to(tl.int64)[:, None],"),)),
    Bug("quant_gemv.group", "quant", "steps over several groups: one scale for the whole step",
        ((_GEMV_SPAN_SCALE, "s_ptr + rows.to(tl.int64)[:, None] * GROUPS + (k_step // GROUP + 0 * k)[None, :],"),)),
    Bug("quant_gemv.group", "quant", "the group scale applied per channel too",
        (("    if GROUP == 0:\n        y = y * tl.load", "    if GROUP >= 0:\n        y = y * tl.load"),)),
    # the GEMM
    Bug("quant_gemm", "quant", "the scale on the wrong axis (per token, not per output feature)",
        (("acc = acc * tl.load(s_ptr + rn, mask=n_ok, other=0.0)[None, :]",
          "acc = acc * tl.load(s_ptr + rm, mask=m_ok, other=0.0)[:, None]"),)),
    Bug("quant_gemm.group", "quant", "the group index off by one",
        ((_GEMM_SCALE, _GEMM_SCALE.replace("k0 // GROUP", "k0 // GROUP + 1")),), out_of_bounds=True),
    Bug("quant_gemm.group", "quant", "the last partial K group dropped",
        (("    for k0 in range(0, K, BLOCK_K):", "    for k0 in range(0, K - K % GROUP, BLOCK_K):"),)),
    Bug("quant_gemm.fp8", "quant", "the fp8 tile truncated to integers",
        (("other=0.0).to(a.dtype)", "other=0.0).to(tl.int32).to(a.dtype)"),)),
]
