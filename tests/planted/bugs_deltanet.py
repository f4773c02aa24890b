"""Planted bugs of chapters 13_conv1d to 18_cuda_graphs's DeltaNet kernels: the conv1d, the gates and the L2 norm of q
and k, the gated delta rule (recurrent and chunked), the gated RMSNorm and the decode counters."""
from planted import Bug, out_of_bounds

_P, _D = "conv1d_prefill", "conv1d_decode"
_FP, _FD = "conv1d_l2norm.prefill", "conv1d_l2norm.decode"

CONV1D = [
    # conv_prefill_tile: K shifted loads, the state before token 0 (two tiles on each grid axis)
    Bug(_P, "conv1d", "the taps in reverse order",
        (("        s = t - (K - 1) + j                                                    # [BLOCK_T] source tokens\n",
          "        s = t - j\n"),)),
    Bug(_P, "conv1d", "the state read one column early (K - 1 + s)",
        (("v += tl.load(state_ptr + c[None, :] * K + (K + s)[:, None]",
          "v += tl.load(state_ptr + c[None, :] * K + (K - 1 + s)[:, None]"),)),
    Bug(_P, "conv1d", "the token index taken within the tile (t % BLOCK_T)",
        (("        s = t - (K - 1) + j                                                    # [BLOCK_T] source tokens\n",
          "        s = t % BLOCK_T - (K - 1) + j\n"),)),
    Bug(_P, "conv1d", "the taps of the first channel block for every block",
        (("w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0)",
          "w = tl.load(w_ptr + (c % BLOCK_C) * K + j, mask=cmask, other=0.0)"),)),
    Bug(_P, "conv1d", "the state ignored (zeros before token 0)",
        (("            v += tl.load(state_ptr + c[None, :] * K + (K + s)[:, None],\n"
          "                         mask=(s < 0)[:, None] & cmask[None, :], other=0.0).to(tl.float32)\n",
          "            v += 0.0\n"),)),
    Bug(_P, "conv1d", "no s < T mask (tokens past the end read)",
        (("        inside = (s >= 0) & (s < T)\n", "        inside = s >= 0\n"),)),
    Bug(_FP, "conv1d", "the taps in reverse order (fused)",
        (("        s = t - (K - 1) + j                                                    # [BLOCK_T] source tokens\n",
          "        s = t - j\n"),)),
    # conv_prefill_new_state: the last K inputs of cat(state, x)
    Bug(_P, "conv1d", "the new state one token late (T - K + 1 + i)",
        (("        s = T - K + i\n", "        s = T - K + 1 + i\n"),)),
    Bug(_P, "conv1d", "the new state without the old one (zeros when T < K)",
        (("            v = tl.where(s >= 0, v, old)\n", ""),)),
    Bug(_P, "conv1d", "the new state's columns newest first",
        (("tl.store(new_state_ptr + c * K + i, v, mask=cmask)",
          "tl.store(new_state_ptr + c * K + (K - 1 - i), v, mask=cmask)"),)),
    # conv_decode_step: the state rolled in place, the conv over the new window
    Bug(_D, "conv1d", "the state not rolled (never stored)",
        (("        tl.store(state_ptr + c * K + i, v, mask=cmask)\n", ""),)),
    Bug(_D, "conv1d", "the window without the shift (state column i, not i + 1)",
        (("v = tl.load(state_ptr + c * K + (i + 1), mask=cmask, other=0.0)",
          "v = tl.load(state_ptr + c * K + i, mask=cmask, other=0.0)"),)),
    Bug(_D, "conv1d", "the conv over the old window, before the roll",
        (("        tl.store(state_ptr + c * K + i, v, mask=cmask)\n        acc += v.to(tl.float32)",
          "        old = tl.load(state_ptr + c * K + i, mask=cmask, other=0.0)\n"
          "        tl.store(state_ptr + c * K + i, v, mask=cmask)\n        acc += old.to(tl.float32)"),)),
    Bug(_D, "conv1d", "no channel mask",
        (("            v = tl.load(state_ptr + c * K + (i + 1), mask=cmask, other=0.0)\n",
          "            v = tl.load(state_ptr + c * K + (i + 1))\n"),
         ("        tl.store(state_ptr + c * K + i, v, mask=cmask)\n", "        tl.store(state_ptr + c * K + i, v)\n"))),
    Bug(_FD, "conv1d", "the window without the shift (fused)",
        (("v = tl.load(state_ptr + c * K + (i + 1), mask=cmask, other=0.0)",
          "v = tl.load(state_ptr + c * K + i, mask=cmask, other=0.0)"),)),
    # the edge "a prompt shorter than the conv, no state" (T = 2 < K): the new state's first columns precede
    # token 0 and must come out zeros; no other case has a short prompt without a state
    *(Bug(slot, "conv1d", what, ((old, new),)) for slot in (_P, _FP) for what, old, new in (
        ("without a state, the new state's columns before token 0 never written",
         "            v = tl.where(s >= 0, v, old)\n        tl.store(new_state_ptr + c * K + i, v, mask=cmask)",
         "            v = tl.where(s >= 0, v, old)\n            tl.store(new_state_ptr + c * K + i, v, mask=cmask)\n"
         "        else:\n            tl.store(new_state_ptr + c * K + i, v, mask=tl.where(s >= 0, cmask, False))"),
        ("without a state, the new state's columns before token 0 read from the state pointer",
         "        if HAS_STATE:\n            old = tl.load(state_ptr + c * K + (K + s), "
         "mask=tl.where(s < 0, cmask, False), other=0.0)\n            v = tl.where(s >= 0, v, old)",
         "        old = tl.load(state_ptr + c * K + (K + s), mask=tl.where(s < 0, cmask, False), other=0.0)\n"
         "        v = tl.where(s >= 0, v, old)"))),
]

_REC = "gated_delta_recurrent"
_CH = "gated_delta_chunked"
# the chunked kernels' decayed products (kernel 1's A, kernel 3's P), and two ways of writing the decay that are
# exact until exp overflows: split into factors of each token, or unclamped and masked by a product
CHUNK_A = ("    decay = tl.exp(tl.minimum(gamma[:, None] - gamma[None, :], 0.0))   # Gamma_ij (i > j: <= 1)\n"
           "    A = tl.where(i > j, tl.dot(k, tl.trans(k), input_precision=PREC) * beta[:, None] * decay, 0.0)")
CHUNK_P = ("    decay = tl.exp(tl.minimum(gamma[:, None] - gamma[None, :], 0.0))\n"
           "    P = tl.where(i >= j, tl.dot(q, tl.trans(k), input_precision=PREC) * decay, 0.0)")
SPLIT_K = "    ku = k.to(tl.float32) * tl.exp(-gamma)[:, None]\n"
DECAY_THEN_PREDICT = ("    S = S * tl.exp(g)                                        # forget a little\n"
                      "    u = beta * (v - tl.sum(S * k[:, None], axis=0))          "
                      "# the prediction's error for k: [BV]")
UNCLAMPED = "    decay = tl.exp(gamma[:, None] - gamma[None, :])\n"

DELTA_RULE = [
    # recurrent: one program per (value head, value block), the state in registers over the tokens
    Bug(_REC, "delta_rule", "the initial state ignored (always zeros)",
        (("        S = tl.load(s0_ptr + state, mask=smask, other=0.0)\n",
          "        S = tl.zeros([BK, BV], dtype=tl.float32)\n"),)),
    Bug(_REC, "delta_rule", "no decay",
        (("    S = S * tl.exp(g)                                        # forget a little\n", ""),)),
    Bug(_REC, "delta_rule", "no beta in the update",
        (("u = beta * (v - tl.sum(S * k[:, None], axis=0))", "u = v - tl.sum(S * k[:, None], axis=0)"),)),
    Bug(_REC, "delta_rule", "beta on v only (u = beta v - S^T k)",
        (("u = beta * (v - tl.sum(S * k[:, None], axis=0))", "u = beta * v - tl.sum(S * k[:, None], axis=0)"),)),
    Bug(_REC, "delta_rule", "the state read along the wrong axis (S k, not S^T k)",
        (("u = beta * (v - tl.sum(S * k[:, None], axis=0))", "u = beta * (v - tl.sum(S * k[None, :], axis=1))"),)),
    Bug(_REC, "delta_rule", "the prediction from the undecayed state",
        ((DECAY_THEN_PREDICT, "    u = beta * (v - tl.sum(S * k[:, None], axis=0))\n    S = S * tl.exp(g)"),)),
    Bug(_REC, "delta_rule", "the decay applied after the write",
        ((DECAY_THEN_PREDICT + "\n    S = S + k[:, None] * u[None, :]                          "
          "# write it: rank-1 update",
          "    u = beta * (v - tl.sum(S * k[:, None], axis=0))\n    S = (S + k[:, None] * u[None, :]) * tl.exp(g)"),)),
    Bug(_REC, "delta_rule", "the state read with k, not q",
        (("o = tl.sum(S * q[:, None], axis=0)", "o = tl.sum(S * k[:, None], axis=0)"),)),
    Bug(_REC, "delta_rule", "the output read before the write",
        (("    S = S + k[:, None] * u[None, :]                          # write it: rank-1 update\n"
          "    o = tl.sum(S * q[:, None], axis=0)                       # read with the updated state: [BV]\n",
          "    o = tl.sum(S * q[:, None], axis=0)\n"
          "    S = S + k[:, None] * u[None, :]\n"),)),
    Bug(_REC, "delta_rule", "q read at token 0 for every token",
        (("q = tl.load(q_ptr + t * sq + h * DK + rk", "q = tl.load(q_ptr + h * DK + rk"),)),
    Bug(_REC, "delta_rule", "every token's output written at token 0",
        (("tl.store(o_ptr + (t * HV + hv) * DV + rv", "tl.store(o_ptr + hv * DV + rv"),)),
    Bug(_REC, "delta_rule", "o at a token stride of H heads, not HV",
        (("tl.store(o_ptr + (t * HV + hv) * DV + rv", "tl.store(o_ptr + (t * H + hv) * DV + rv"),)),
    Bug(_REC, "delta_rule", "g and beta at a token stride of H heads, not HV",
        (("g = tl.load(g_ptr + t * HV + hv)", "g = tl.load(g_ptr + t * H + hv)"),
         ("beta = tl.load(beta_ptr + t * HV + hv)", "beta = tl.load(beta_ptr + t * H + hv)"))),
    Bug(_REC, "delta_rule", "q and k at a packed token stride (views assumed contiguous)",
        (("q = tl.load(q_ptr + t * sq + h * DK + rk", "q = tl.load(q_ptr + (t * H + h) * DK + rk"),
         ("k = tl.load(k_ptr + t * sk + h * DK + rk", "k = tl.load(k_ptr + (t * H + h) * DK + rk"))),
    Bug(_REC, "delta_rule", "value head j reads key head j % H (GQA interleaved)",
        (("q = tl.load(q_ptr + t * sq + h * DK + rk", "q = tl.load(q_ptr + t * sq + (hv % H) * DK + rk"),
         ("k = tl.load(k_ptr + t * sk + h * DK + rk", "k = tl.load(k_ptr + t * sk + (hv % H) * DK + rk"))),
    Bug(_REC, "delta_rule", "no mask on the key dims",
        (("q = tl.load(q_ptr + t * sq + h * DK + rk, mask=mk, other=0.0)", "q = tl.load(q_ptr + t * sq + h * DK + rk)"),
         ("k = tl.load(k_ptr + t * sk + h * DK + rk, mask=mk, other=0.0)",
          "k = tl.load(k_ptr + t * sk + h * DK + rk)"))),
    Bug(_REC, "delta_rule", "the final state never stored",
        (("    tl.store(st_ptr + state, S, mask=smask)\n    # END SOLUTION", "    # END SOLUTION"),)),
    # chunked, the UT transform's forward substitution
    Bug(_CH, "delta_rule", "forward substitution one row short",
        (("    for i in range(2, SUB):\n", "    for i in range(2, SUB - 1):\n"),)),
    Bug(_CH, "delta_rule", "forward substitution with the sign flipped",
        (("a = a + tl.sum(a[:, :, None] * Y, axis=1)", "a = a - tl.sum(a[:, :, None] * Y, axis=1)"),)),
    # chunked, kernel 1: the WY representation
    Bug(_CH, "delta_rule", "gamma = g, not its cumulative sum (kernel 1)",
        (("    gamma = tl.cumsum(g, axis=0)                                 # log-decay from the chunk start\n",
          "    gamma = g\n"),)),
    Bug(_CH, "delta_rule", "A with its diagonal (i >= j)",
        (("A = tl.where(i > j, tl.dot(k, tl.trans(k)", "A = tl.where(i >= j, tl.dot(k, tl.trans(k)"),)),
    Bug(_CH, "delta_rule", "A scaled by beta of the column, not the row",
        (("input_precision=PREC) * beta[:, None] * decay, 0.0)",
          "input_precision=PREC) * beta[None, :] * decay, 0.0)"),)),
    Bug(_CH, "delta_rule", "w without the decay from the chunk start",
        (("        scale = beta * tl.exp(gamma)\n", "        scale = beta\n"),)),
    Bug(_CH, "delta_rule", "u with the keys' decay (beta exp(gamma) for both)",
        (("    else:\n        scale = beta\n", "    else:\n        scale = beta * tl.exp(gamma)\n"),)),
    # chunked, kernel 2: the scan over chunks (two chunks, the last partial, in the first shape)
    Bug(_CH, "delta_rule", "the chunk-start state stored after the update",
        (("        tl.store(hs_ptr + (n * HV + hv) * DK * DV + tile, S.to(hs_ptr.dtype.element_ty), mask=smask)\n", ""),
         ("        S = S * tl.exp(gamma_last) + tl.dot(tl.trans(k), v_decayed.to(k.dtype), input_precision=PREC)\n",
          "        S = S * tl.exp(gamma_last) + tl.dot(tl.trans(k), v_decayed.to(k.dtype), input_precision=PREC)\n"
          "        tl.store(hs_ptr + (n * HV + hv) * DK * DV + tile, S.to(hs_ptr.dtype.element_ty), mask=smask)\n"))),
    Bug(_CH, "delta_rule", "every chunk-start state stored at chunk 0's place",
        (("tl.store(hs_ptr + (n * HV + hv) * DK * DV + tile", "tl.store(hs_ptr + hv * DK * DV + tile"),)),
    Bug(_CH, "delta_rule", "the state not decayed over the chunk",
        (("S = S * tl.exp(gamma_last) + tl.dot(", "S = S + tl.dot("),)),
    Bug(_CH, "delta_rule", "the writes decayed the wrong way (gamma - gamma_C)",
        (("v_decayed = v_new * tl.exp(gamma_last - gamma)[:, None]",
          "v_decayed = v_new * tl.exp(gamma - gamma_last)[:, None]"),)),
    # chunked, kernel 3: the output
    Bug(_CH, "delta_rule", "the output without the token's own write (i > j)",
        (("P = tl.where(i >= j, tl.dot(q, tl.trans(k)", "P = tl.where(i > j, tl.dot(q, tl.trans(k)"),)),
    Bug(_CH, "delta_rule", "the chunk-start state's read not decayed",
        (("o = (tl.dot(q, S.to(q.dtype), input_precision=PREC) * tl.exp(gamma)[:, None]",
          "o = (tl.dot(q, S.to(q.dtype), input_precision=PREC)"),)),
    Bug(_CH, "delta_rule", "the in-chunk attention not causal",
        (("P = tl.where(i >= j, tl.dot(q, tl.trans(k), input_precision=PREC) * decay, 0.0)",
          "P = tl.dot(q, tl.trans(k), input_precision=PREC) * decay"),)),
    # the edge "strong decays in head 0" (g down to -15.5 a token): gamma passes -88 within a chunk, where
    # exp(-gamma), and exp(gamma_i - gamma_j) for i < j, overflow fp32; the slow decays of the other cases never
    # leave exp's range
    Bug(_CH, "delta_rule", "A: the decay split as exp(gamma_i) exp(-gamma_j) (overflows for strong decays)",
        ((CHUNK_A, SPLIT_K + "    A = tl.where(i > j, tl.dot(k * tl.exp(gamma)[:, None], tl.trans(ku), "
                   "input_precision=PREC) * beta[:, None], 0.0)"),)),
    Bug(_CH, "delta_rule", "A: the decay unclamped, masked by a product (inf * 0 for strong decays)",
        ((CHUNK_A, UNCLAMPED + "    A = tl.dot(k, tl.trans(k), input_precision=PREC) * beta[:, None] * decay "
                     "* (i > j)"),)),
    Bug(_CH, "delta_rule", "P: the decay split as exp(gamma_i) exp(-gamma_j) (overflows for strong decays)",
        ((CHUNK_P, SPLIT_K + "    P = tl.where(i >= j, tl.dot(q.to(tl.float32) * tl.exp(gamma)[:, None], "
                   "tl.trans(ku), input_precision=PREC), 0.0)"),)),
    Bug(_CH, "delta_rule", "P: the decay unclamped, masked by a product (inf * 0 for strong decays)",
        ((CHUNK_P, UNCLAMPED + "    P = tl.dot(q, tl.trans(k), input_precision=PREC) * decay * (i >= j)"),)),
]

GATES = [
    Bug("deltanet_gates", "deltanet_gates", "no program offset",
        (("i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "i = tl.arange(0, BLOCK)"),)),
    Bug("deltanet_gates", "deltanet_gates", "token and head swapped (i % HV, i // HV)",
        (("token, head = i // HV, i % HV", "token, head = i % HV, i // HV"),)),
    Bug("deltanet_gates", "deltanet_gates", "b and a at a packed token stride (token * HV)",
        (("b = tl.load(b_ptr + token * sb + head", "b = tl.load(b_ptr + token * HV + head"),
         ("a = tl.load(a_ptr + token * sa + head", "a = tl.load(a_ptr + token * HV + head"))),
    Bug("deltanet_gates", "deltanet_gates", "b read at a's token stride",
        (("b = tl.load(b_ptr + token * sb + head", "b = tl.load(b_ptr + token * sa + head"),)),
    Bug("deltanet_gates", "deltanet_gates", "no mask",
        (("b = tl.load(b_ptr + token * sb + head, mask=mask, other=0.0)", "b = tl.load(b_ptr + token * sb + head)"),
         ("a = tl.load(a_ptr + token * sa + head, mask=mask, other=0.0)", "a = tl.load(a_ptr + token * sa + head)"),
         ("A_log = tl.load(A_log_ptr + head, mask=mask, other=0.0)", "A_log = tl.load(A_log_ptr + head)"),
         ("dt_bias = tl.load(dt_bias_ptr + head, mask=mask, other=0.0)", "dt_bias = tl.load(dt_bias_ptr + head)"),
         ("tl.store(beta_ptr + i, sigmoid(b).to(beta_ptr.dtype.element_ty), mask=mask)",
          "tl.store(beta_ptr + i, sigmoid(b).to(beta_ptr.dtype.element_ty))"),
         ("tl.store(g_ptr + i, -tl.exp(A_log) * softplus(a + dt_bias), mask=mask)",
          "tl.store(g_ptr + i, -tl.exp(A_log) * softplus(a + dt_bias))"))),
    Bug("deltanet_gates", "deltanet_gates", "A_log used as A (no exp)",
        (("-tl.exp(A_log) * softplus(a + dt_bias)", "-A_log * softplus(a + dt_bias)"),)),
    Bug("deltanet_gates", "deltanet_gates", "a and b swapped (beta from a, g from b)",
        (("sigmoid(b).to(beta_ptr.dtype.element_ty)", "sigmoid(a).to(beta_ptr.dtype.element_ty)"),
         ("-tl.exp(A_log) * softplus(a + dt_bias)", "-tl.exp(A_log) * softplus(b + dt_bias)"))),
    Bug("deltanet_gates", "deltanet_gates", "softplus as log(1 + exp(x)) (inf past exp's overflow)",
        (("-tl.exp(A_log) * softplus(a + dt_bias)", "-tl.exp(A_log) * tl.log(1.0 + tl.exp(a + dt_bias))"),)),
    Bug("deltanet_gates", "deltanet_gates", "sigmoid as exp(x) / (1 + exp(x)) (inf / inf past exp's overflow)",
        (("sigmoid(b).to(beta_ptr.dtype.element_ty)",
          "(tl.exp(b) / (1.0 + tl.exp(b))).to(beta_ptr.dtype.element_ty)"),)),
]

L2NORM = [
    Bug("l2norm_qk", "deltanet_gates", "token and head swapped (r % H, r // H)",
        (("    t = (r // H).to(tl.int64)\n    h = r % H\n", "    t = (r % H).to(tl.int64)\n    h = r // H\n"),)),
    Bug("l2norm_qk", "deltanet_gates", "packed rows assumed (r * D), strides ignored",
        (("x = tl.load(src_ptr + (t * stride_t + h * stride_h)[:, None] + d[None, :]",
          "x = tl.load(src_ptr + r.to(tl.int64)[:, None] * D + d[None, :]"),)),
    Bug("l2norm_qk", "deltanet_gates", "the head stride taken to be D",
        (("x = tl.load(src_ptr + (t * stride_t + h * stride_h)[:, None]",
          "x = tl.load(src_ptr + (t * stride_t + h * D)[:, None]"),)),
    Bug("l2norm_qk", "deltanet_gates", "no eps",
        (("y = l2_normalize_rows(x.to(tl.float32), eps) * scale",
          "y = l2_normalize_rows(x.to(tl.float32), 0.0) * scale"),)),
    Bug("l2norm_qk", "deltanet_gates", "the squares summed in x's dtype (cast after the sum)",
        (("y = l2_normalize_rows(x.to(tl.float32), eps) * scale",
          "y = x * tl.rsqrt(tl.sum(x * x, axis=1).to(tl.float32) + eps)[:, None] * scale"),)),
    Bug("l2norm_qk", "deltanet_gates", "eps outside the sqrt",
        (("y = l2_normalize_rows(x.to(tl.float32), eps) * scale",
          "xf = x.to(tl.float32)\n    y = xf / (tl.sqrt(tl.sum(xf * xf, axis=1)) + eps)[:, None] * scale"),)),
    Bug("l2norm_qk", "deltanet_gates", "no row mask",
        (("    mask = (r < rows)[:, None] & (d < D)[None, :]\n", "    mask = (d < D)[None, :]\n"),)),
]

GATED_RMSNORM = [
    Bug("gated_rmsnorm", "gated_rmsnorm", "no program offset",
        (("r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)", "r = tl.arange(0, BLOCK_R)"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "no row mask",
        (("mask = (r < rows)[:, None] & (d < D)[None, :]", "mask = (d < D)[None, :]"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "z read at x's offsets (its token stride ignored)",
        (("z = tl.load(z_ptr + z_rows[:, None] + d[None, :]", "z = tl.load(z_ptr + offsets"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "eps outside the sqrt",
        (("inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)",
          "inv_rms = 1.0 / (tl.sqrt(tl.sum(x * x, axis=1) / D) + eps)"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "no eps",
        (("tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)", "tl.rsqrt(tl.sum(x * x, axis=1) / D)"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "no fp32 cast of x",
        (("x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)",
          "x = tl.load(x_ptr + offsets, mask=mask, other=0.0)"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "mean over the padded block, not the row",
        (("tl.sum(x * x, axis=1) / D + eps", "tl.sum(x * x, axis=1) / BLOCK_D + eps"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "silu as z exp(z) / (1 + exp(z)) (inf / inf past exp's overflow)",
        (("y = x * inv_rms[:, None] * w[None, :] * silu(z)\n    tl.store",
          "y = x * inv_rms[:, None] * w[None, :] * (z * tl.exp(z) / (1.0 + tl.exp(z)))\n    tl.store"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "1 + w (the other norms' convention)",
        (("y = x * inv_rms[:, None] * w[None, :] * silu(z)",
          "y = x * inv_rms[:, None] * (1.0 + w)[None, :] * silu(z)"),)),
    Bug("gated_rmsnorm", "gated_rmsnorm", "the gate applied before the norm",
        (("    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)                         # [BLOCK_R]\n"
          "    y = x * inv_rms[:, None] * w[None, :] * silu(z)\n",
          "    x = x * silu(z)\n    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)\n"
          "    y = x * inv_rms[:, None] * w[None, :]\n"),)),
]

ENGINE = [
    Bug("advance_positions", "engine", "no mask",
        (("counters = tl.load(steps_ptr + offsets, mask=mask)", "counters = tl.load(steps_ptr + offsets)"),
         ("tl.store(steps_ptr + offsets, counters + 1, mask=mask)", "tl.store(steps_ptr + offsets, counters + 1)"))),
    Bug("advance_positions", "engine", "a mask one past the end (<= n)",
        (("mask = offsets < n", "mask = offsets <= n"),)),
    Bug("advance_positions", "engine", "the add done in fp32",
        (("tl.store(steps_ptr + offsets, counters + 1, mask=mask)",
          "tl.store(steps_ptr + offsets, counters + 1.0, mask=mask)"),)),
    Bug("advance_positions", "engine", "only the first counter advanced",
        (("tl.store(steps_ptr + offsets, counters + 1, mask=mask)",
          "tl.store(steps_ptr + offsets, counters + (offsets == 0), mask=mask)"),)),
]

BUGS = out_of_bounds(CONV1D + DELTA_RULE + GATES + L2NORM + GATED_RMSNORM + ENGINE,
                     "no s < T mask (tokens past the end read)", "no channel mask", "no mask on the key dims",
                     "no mask", "no row mask", "a mask one past the end (<= n)",
                     # these also stray past a tensor on the way to a wrong answer (the second inside a helper)
                     "deltanet_gates: token and head swapped (i % HV, i // HV)",
                     "conv1d_prefill: the new state one token late (T - K + 1 + i)",
                     "without a state, the new state's columns before token 0 read from the state pointer")
