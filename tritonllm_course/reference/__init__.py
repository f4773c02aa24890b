"""PyTorch references for every kernel slot: plain, readable, accurate for fp64 inputs.

Each function takes the keyword arguments the slot's Triton host wrapper takes, so a slot can check a
kernel with `reference(**inputs)`. Batch 1 throughout, tokens first: activations are [T, ...].
Each slot names its own reference (`slots.get(name).reference`).
"""
from .attention import (attention, causal_mask, decode_attention, kv_cache_read, kv_cache_write,
                        masked_softmax, output_gate, pv, qk_scores, scaled_softmax)
from .basics import vector_add
from .conv1d import conv1d_decode, conv1d_prefill
from .delta_rule import gated_delta_rule_chunked, gated_delta_rule_recurrent
from .deltanet import deltanet_gates, l2norm, l2norm_qk
from .embedding import embedding
from .fusion import (gate_up_swiglu, gated_delta_rule_recurrent_gates, gated_norm_linear_residual,
                     linear_residual, qk_norm_rope_cache, rms_norm_linear)
from .gelu import gelu, gelu_linear
from .linear import attention_qkv_proj, deltanet_in_proj, linear, split_query_gate
from .lm_head import lm_head
from .mlp import mlp, gate_up, swiglu, swiglu_merged
from .norms import gated_rms_norm, qk_norm, rms_norm
from .precision import acc
from .residual import residual_add, residual_rms_norm
from .rope import apply_rope, apply_rope_interleaved, rope_cache, rotate_half
from .sampling import argmax, sample, top_k_top_p_filter
