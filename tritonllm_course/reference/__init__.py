"""PyTorch references for every kernel slot: plain, readable, accurate for fp64 inputs.

Each function takes the keyword arguments the slot's Triton host wrapper takes, so a slot can check a
kernel with `reference(**inputs)`. Batch 1 throughout, tokens first: activations are [T, ...].
`BY_SLOT` maps each slot name to its reference.
"""
from .attention import (attention, causal_mask, decode_attention, kv_cache_read, kv_cache_write,
                        masked_softmax, output_gate, pv, qk_scores, scaled_softmax)
from .conv1d import conv1d_decode, conv1d_prefill
from .delta_rule import gated_delta_rule_chunked, gated_delta_rule_recurrent
from .deltanet import deltanet_gates, l2norm, l2norm_qk
from .embedding import embedding
from .fused import gate_up_swiglu, rms_norm_linear, vector_add
from .fusion_extra import (gated_delta_rule_recurrent_gates, gated_norm_linear_residual, linear_residual,
                           qk_norm_rope_cache)
from .linear import attention_qkv_proj, deltanet_in_proj, linear, split_query_gate
from .lm_head import lm_head
from .mlp import mlp, mlp_gate_up, swiglu
from .norms import gated_rms_norm, qk_norm, rms_norm
from .precision import acc
from .residual import residual_add, residual_rms_norm
from .rope import apply_rope, apply_rope_interleaved, rope_cache, rotate_half
from .sampling import argmax, sample, top_k_top_p_filter

BY_SLOT = {
    "vector_add": vector_add,
    "embedding_lookup": embedding,
    "qkv_proj": linear,
    "q_rope": apply_rope,
    "k_rope": apply_rope,
    "qk_score": qk_scores,
    "softmax_mask": masked_softmax,
    "pv_agg": pv,
    "attn_out_proj": linear,
    "attn_residual": residual_add,
    "mlp_gate_up": mlp_gate_up,
    "swish_mult": swiglu,
    "mlp_down_proj": linear,
    "mlp_residual": residual_add,
    "ln1": rms_norm,
    "ln2": rms_norm,
    "logits_head": lm_head,
    "argmax_sample": argmax,
    "cache_kv_write": kv_cache_write,
    "cache_kv_read": kv_cache_read,
    "causal_mask_gen": causal_mask,
    "scale_softmax": scaled_softmax,
    "qk_norm": qk_norm,
    "attn_output_gate": output_gate,
    "conv1d_prefill": conv1d_prefill,
    "conv1d_decode": conv1d_decode,
    "deltanet_gates": deltanet_gates,
    "l2norm_qk": l2norm_qk,
    "gated_delta_recurrent": gated_delta_rule_recurrent,
    "gated_delta_chunked": gated_delta_rule_chunked,
    "gated_rmsnorm": gated_rms_norm,
    "fused_rmsnorm_linear": rms_norm_linear,
    "residual_rmsnorm": residual_rms_norm,
    "fused_gate_up_silu": gate_up_swiglu,
    "fused_linear_residual": linear_residual,
    "qk_norm_rope_cache": qk_norm_rope_cache,
    "gated_delta_recurrent_gates": gated_delta_rule_recurrent_gates,
    "gated_norm_linear_residual": gated_norm_linear_residual,
    "flash_attention": attention,
    "splitk_gemv": linear,
    "flash_decoding": decode_attention,
}
