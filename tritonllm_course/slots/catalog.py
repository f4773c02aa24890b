"""Every slot of the course, planned or ready: the article's 21 operators, what Qwen3.5 adds, and the
performance kernels. Kernel details are attached by the `slots/<family>.py` modules."""
from . import Slot, register

# (name, article op, title, what it is in Qwen3.5-0.8B, chapter)
_CATALOG = [
    ("vector_add", None, "vector add", "the first kernel: programs, blocks, masks", "01_triton_basics"),
    # the source article's 21 operators, in their Qwen3.5 form
    ("embedding_lookup", 1, "embedding lookup", "row gather from the 248,320 x 1024 table", "03_embedding"),
    ("qkv_proj", 2, "QKV projection",
     "attention: [query+gate interleaved per head | k | v]; DeltaNet: in_proj_qkv, z, b, a", "05_projections"),
    ("q_rope", 3, "RoPE on q", "rotate-half RoPE on the first 64 of 256 dims, theta 1e7", "06_rope"),
    ("k_rope", 4, "RoPE on k", "same rotation on the 2 KV heads", "06_rope"),
    ("qk_score", 5, "attention scores", "q . K^T over the cache, 4 query heads per KV head", "08_attention"),
    ("softmax_mask", 6, "masked softmax", "masked softmax in fp32", "08_attention"),
    ("pv_agg", 7, "P . V", "probabilities times the cached values", "08_attention"),
    ("attn_out_proj", 8, "output projection", "o_proj after the sigmoid gate; DeltaNet out_proj",
     "09_output_residual"),
    ("attn_residual", 9, "attention residual add", "x + mixer(x), later fused with the next norm",
     "09_output_residual"),
    ("mlp_gate_up", 10, "MLP gate/up projection", "1024 -> 2 x 3584", "10_mlp"),
    ("swish_mult", 11, "SwiGLU", "silu(gate) * up", "10_mlp"),
    ("mlp_down_proj", 12, "MLP down projection", "3584 -> 1024", "10_mlp"),
    ("mlp_residual", 13, "MLP residual add", "h + mlp(h)", "09_output_residual"),
    ("ln1", 14, "input RMSNorm", "zero-centred RMSNorm x/rms * (1+w), fp32 statistics", "04_rmsnorm"),
    ("ln2", 15, "post-attention RMSNorm", "the same norm before the MLP (and the final norm)", "04_rmsnorm"),
    ("logits_head", 16, "LM head", "tied lm_head, 248,320 outputs: the largest read (508 MB)", "11_lm_head"),
    ("argmax_sample", 17, "argmax and sampling", "two-stage argmax; temperature / top-k / top-p",
     "12_sampling"),
    ("cache_kv_write", 18, "KV cache write", "static cache, position read from device memory", "07_kv_cache"),
    ("cache_kv_read", 19, "KV cache read", "the cached keys/values a decode step attends to", "07_kv_cache"),
    ("causal_mask_gen", 20, "causal mask", "prefill causal mask", "08_attention"),
    ("scale_softmax", 21, "scaled softmax", "1/sqrt(256) scaling and normalisation", "08_attention"),
    # beside them in Qwen3.5's gated attention
    ("qk_norm", None, "per-head q/k RMSNorm", "zero-centred RMSNorm over each 256-dim head, before RoPE",
     "08_attention"),
    ("attn_output_gate", None, "attention output gate", "o * sigmoid(gate) before o_proj", "08_attention"),
    # Gated DeltaNet (18 of the 24 layers)
    ("conv1d_prefill", None, "causal depthwise conv1d", "kernel 4 over 6144 channels, then SiLU",
     "13_conv1d"),
    ("conv1d_decode", None, "conv1d decode step", "rolling conv state update, then SiLU", "13_conv1d"),
    ("deltanet_gates", None, "DeltaNet gates", "beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)",
     "14_gates_l2norm"),
    ("l2norm_qk", None, "L2 norm of q and k", "per 128-dim head; q scaled by 128^-0.5", "14_gates_l2norm"),
    ("gated_delta_recurrent", None, "gated delta rule, recurrent", "decode: fp32 state [16, 128, 128]",
     "15_delta_rule"),
    ("gated_delta_chunked", None, "gated delta rule, chunked", "prefill: chunk 64, UT transform / WY",
     "16_delta_rule_chunked"),
    ("gated_rmsnorm", None, "gated RMSNorm", "norm(o) * w * silu(z) per 128-dim value head",
     "17_deltanet_layer"),
    # performance kernels
    ("fused_rmsnorm_linear", None, "RMSNorm + projection", "ln1 + qkv_proj, ln2 + gate/up in one kernel",
     "21_norm_fusion"),
    ("residual_rmsnorm", None, "residual add + RMSNorm", "one pass over the residual stream", "21_norm_fusion"),
    ("fused_gate_up_silu", None, "gate/up + SwiGLU", "the MLP's first half in one kernel", "21_norm_fusion"),
    ("fused_linear_residual", None, "projection + residual add",
     "o_proj / out_proj / down and the residual add after each in one kernel", "22_layer_fusion"),
    ("qk_norm_rope_cache", None, "q/k norm + RoPE + KV cache write",
     "an attention layer's five small kernels between its projection and the attention, in one", "22_layer_fusion"),
    ("gated_delta_recurrent_gates", None, "DeltaNet gates + recurrent delta rule",
     "decode: beta and g computed where the recurrence uses them, one kernel for two", "22_layer_fusion"),
    ("gated_norm_linear_residual", None, "gated RMSNorm + out_proj + residual add",
     "decode: the DeltaNet output normalised per head inside its projection, the stream updated", "22_layer_fusion"),
    ("flash_attention", None, "FlashAttention (prefill)", "QK^T, mask, softmax, PV with online softmax",
     "23_flash_attention"),
    ("splitk_gemv", None, "split-K GEMV", "narrow decode GEMVs and the LM head split along K", "24_split_k"),
    ("flash_decoding", None, "FlashDecoding", "split-KV decode attention with an exact merge",
     "25_flash_decoding"),
]

for _name, _op, _title, _qwen, _chapter in _CATALOG:
    register(Slot(name=_name, title=_title, op=_op, qwen=_qwen, chapter=_chapter))
