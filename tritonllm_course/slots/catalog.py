"""Every slot of the course, planned or ready: the article's 21 operators, what Qwen3.5 adds, and the
performance kernels, as data: the package (`slots/__init__.py`) registers each as a planned slot when it is
imported, and the `slots/<family>.py` modules attach the kernel details. It imports nothing, so the package
can import it at its top."""

# (name, article op, the article's name for it, title, what it is in Qwen3.5-0.8B, chapter): the course's
# name is the one the engine's steps, the kernel families and the references use; the article's own name is
# kept as `Slot.article` (chapter 02_inside_qwen35's operator map shows both)
CATALOG = [
    ("vector_add", None, None, "vector add", "the first kernel: programs, blocks, masks", "01_triton_basics"),
    # the source article's 21 operators, in their Qwen3.5 form
    ("embedding", 1, "embedding_lookup", "embedding lookup", "row gather from the 248,320 x 1024 table",
     "03_embedding"),
    ("in_proj", 2, "qkv_proj", "QKV projection",
     "attention: [query+gate interleaved per head | k | v]; DeltaNet: in_proj_qkv, z, b, a", "05_projections"),
    ("q_rope", 3, "q_rope", "RoPE on q", "rotate-half RoPE on the first 64 of 256 dims, theta 1e7", "06_rope"),
    ("k_rope", 4, "k_rope", "RoPE on k", "same rotation on the 2 KV heads", "06_rope"),
    ("qk_score", 5, "qk_score", "attention scores", "q . K^T over the cache, 4 query heads per KV head",
     "08_attention"),
    ("softmax_mask", 6, "softmax_mask", "masked softmax", "masked softmax in fp32", "08_attention"),
    ("pv_agg", 7, "pv_agg", "P . V", "probabilities times the cached values", "08_attention"),
    ("out_proj", 8, "attn_out_proj", "output projection", "o_proj after the sigmoid gate; DeltaNet out_proj",
     "09_output_residual"),
    ("attn_residual", 9, "attn_residual", "attention residual add", "x + mixer(x), later fused with the next norm",
     "09_output_residual"),
    ("gate_up", 10, "mlp_gate_up", "MLP gate/up projection", "1024 -> 2 x 3584", "10_mlp"),
    ("swiglu", 11, "swish_mult", "SwiGLU", "silu(gate) * up", "10_mlp"),
    ("down", 12, "mlp_down_proj", "MLP down projection", "3584 -> 1024", "10_mlp"),
    ("mlp_residual", 13, "mlp_residual", "MLP residual add", "h + mlp(h)", "09_output_residual"),
    ("ln1", 14, "ln1", "input RMSNorm", "zero-centred RMSNorm x/rms * (1+w), fp32 statistics", "04_rmsnorm"),
    ("ln2", 15, "ln2", "post-attention RMSNorm", "the same norm before the MLP (and the final norm)", "04_rmsnorm"),
    ("lm_head", 16, "logits_head", "LM head", "tied lm_head, 248,320 outputs: the largest read (509 MB)", "11_lm_head"),
    ("argmax", 17, "argmax_sample", "argmax", "two-stage argmax (sampling: the slot `sample`, the same op)",
     "12_sampling"),
    ("cache_kv_write", 18, "cache_kv_write", "KV cache write", "static cache, position read from device memory",
     "07_kv_cache"),
    ("cache_kv_read", 19, "cache_kv_read", "KV cache read", "the cached keys/values a decode step attends to",
     "07_kv_cache"),
    ("causal_mask_gen", 20, "causal_mask_gen", "causal mask", "prefill causal mask", "08_attention"),
    ("scale_softmax", 21, "scale_softmax", "scaled softmax", "1/sqrt(256) scaling and normalisation", "08_attention"),
    # beside them in Qwen3.5's gated attention
    ("qk_norm", None, None, "per-head q/k RMSNorm", "zero-centred RMSNorm over each 256-dim head, before RoPE",
     "08_attention"),
    ("output_gate", None, None, "attention output gate", "o * sigmoid(gate) before o_proj", "08_attention"),
    # Gated DeltaNet (18 of the 24 layers)
    ("conv1d_prefill", None, None, "causal depthwise conv1d", "kernel 4 over 6144 channels, then SiLU",
     "13_conv1d"),
    ("conv1d_decode", None, None, "conv1d decode step", "rolling conv state update, then SiLU", "13_conv1d"),
    ("deltanet_gates", None, None, "DeltaNet gates", "beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)",
     "14_gates_l2norm"),
    ("l2norm_qk", None, None, "L2 norm of q and k", "per 128-dim head; q scaled by 128^-0.5", "14_gates_l2norm"),
    ("gated_delta_recurrent", None, None, "gated delta rule, recurrent", "decode: fp32 state [16, 128, 128]",
     "15_delta_rule"),
    ("gated_delta_chunked", None, None, "gated delta rule, chunked",
     "prefill: chunks of 16 or 32 tokens, UT transform / WY", "16_delta_rule_chunked"),
    ("gated_rmsnorm", None, None, "gated RMSNorm", "norm(o) * w * silu(z) per 128-dim value head",
     "17_deltanet_layer"),
    # performance kernels
    ("fused_rmsnorm_linear", None, None, "RMSNorm + projection", "ln1 + in_proj, ln2 + gate/up in one kernel",
     "21_norm_fusion"),
    ("residual_rmsnorm", None, None, "residual add + RMSNorm", "one pass over the residual stream", "21_norm_fusion"),
    ("fused_gate_up_silu", None, None, "gate/up + SwiGLU", "the MLP's first half in one kernel", "21_norm_fusion"),
    ("fused_linear_residual", None, None, "projection + residual add",
     "o_proj / out_proj / down and the residual add after each in one kernel", "22_layer_fusion"),
    ("qk_norm_rope_cache", None, None, "q/k norm + RoPE + KV cache write",
     "an attention layer's five small kernels between its projection and the attention, in one", "22_layer_fusion"),
    ("gated_delta_recurrent_gates", None, None, "DeltaNet gates + recurrent delta rule",
     "decode: beta and g computed where the recurrence uses them, one kernel for two", "22_layer_fusion"),
    ("gated_norm_linear_residual", None, None, "gated RMSNorm + out_proj + residual add",
     "decode: the DeltaNet output normalised per head inside its projection, the stream updated", "22_layer_fusion"),
    ("flash_attention", None, None, "FlashAttention (prefill)", "QK^T, mask, softmax, PV with online softmax",
     "23_flash_attention"),
    ("splitk_gemv", None, None, "split-K GEMV", "narrow decode GEMVs and the LM head split along K", "24_split_k"),
    ("flash_decoding", None, None, "FlashDecoding", "split-KV decode attention with an exact merge",
     "25_flash_decoding"),
    # beyond the model: the source article's fused matmul + GELU (Qwen3.5's MLP is SwiGLU)
    ("gemm_gelu", None, None, "GEMM + GELU epilogue", "not in Qwen3.5 (SwiGLU): gelu(x @ W.T) in one kernel",
     "28_compilers"),
    # beyond the bf16 floor: 8-bit weights (the variants `.group` and `.fp8` are added by slots/quant.py)
    ("quant_gemv", None, None, "dequantizing GEMV", "decode projections and the LM head from int8 / fp8 weights",
     "31_weight_quant"),
    ("quant_gemm", None, None, "dequantizing GEMM", "prompt projections from int8 / fp8 weights, tl.dot",
     "31_weight_quant"),
]
