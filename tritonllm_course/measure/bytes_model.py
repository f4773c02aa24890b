"""The byte model (chapter 20_profile): the HBM bytes one decode token must move, per step of the engine's plan, per
kernel slot and in total (docs/qwen35.md §6), computed from the config alone; `floor_us`: those bytes at
the measured copy bandwidth, the time no kernel can beat.

`slot_bytes` counts the steps of a plan: the profiler passes the plan its engine fitted (`engine.plan`), so a
level whose fused kernels a config does not fit is counted as it runs.

`weight_format` (the engine's, `Engine(weight_format=...)`): with 8-bit weights every projection and the LM head
count one byte a weight plus their fp32 scales (one per row; int8_group one per row and 128 columns), so the
floor of an int8 run is the int8 floor. The embedding row stays in the model dtype, as the engine keeps it.
"""
from __future__ import annotations

import torch

from ..config import Qwen35Config
from ..engine.merged import GROUP_SIZE
from ..validate import WEIGHT_FORMATS
from ..engine.plan import STEPS
from .benchmark import ceiling_gbps


# --- the byte model ----------------------------------------------------------------------------------------
def matrix_bytes(rows: int, cols: int, element: int, weight_format: str = "native") -> int:
    """The bytes of a [rows, cols] projection weight as the engine keeps it: `element` bytes a weight, or one
    byte and its fp32 scales (a row's, or a row's per GROUP_SIZE columns for int8_group)."""
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be one of {WEIGHT_FORMATS}, got {weight_format!r}")
    if weight_format == "native":
        return rows * cols * element
    scales = rows * (-(-cols // GROUP_SIZE) if weight_format == "int8_group" else 1)
    return rows * cols + 4 * scales


def step_bytes(config: Qwen35Config, context: int, dtype=torch.bfloat16,
               weight_format: str = "native") -> dict[str, int]:
    """HBM bytes one greedy decode token moves in each step of the engine (`engine.plan.STEPS` names), all
    the step's calls of the token together.

    Counted as docs/qwen35.md §6 does: every weight read once (matrices, norms, conv taps, `A_log`,
    `dt_bias`) in `dtype`, except `A_log` and the gated norm's weight, which the checkpoint keeps in fp32;
    the DeltaNet conv state (model dtype) and recurrent state (fp32), each read and written; the KV cache:
    the new token's K and V written (`cache_kv_write`) and `context` tokens' K and V read (`attention`), where
    `context` is the cache length the step attends to, the new token included; the logits written by the
    LM head; one embedding row. Not counted: activations (the residual stream and the projections' outputs,
    a few KB each; the logits' re-read by the argmax, 0.5 MB) and the RoPE tables' rows.
    For Qwen3.5-0.8B in bf16 the total is 1,544,820,416 + 12,288 * context. With 8-bit weights
    (`weight_format`) the projections and the LM head are counted by `matrix_bytes`.
    """
    if context < 0:
        raise ValueError(f"context must be >= 0 cached tokens, got {context}")
    c = config
    e, f32 = torch.empty((), dtype=dtype).element_size(), 4
    H, n = c.hidden_size, c.num_hidden_layers
    na, nd = len(c.attention_layers), len(c.linear_layers)
    q_width = c.num_attention_heads * c.head_dim
    kv_token = 2 * c.num_key_value_heads * c.head_dim * e                  # K and V of one token, one layer
    attn_in_rows = 2 * q_width + 2 * c.num_key_value_heads * c.head_dim    # merged [q | gate | k | v]
    HV = c.linear_num_value_heads
    dn_in_rows = c.conv_dim + c.linear_value_dim + 2 * HV                  # merged [qkv | z | b | a]
    conv_state = c.conv_dim * c.linear_conv_kernel_dim * e                 # as many columns as taps

    def mat(rows, cols):
        return matrix_bytes(rows, cols, e, weight_format)
    return {
        "embedding": H * e,
        "ln1": n * H * e,
        "attn_in_proj": na * mat(attn_in_rows, H),
        "q_norm": na * c.head_dim * e,
        "k_norm": na * c.head_dim * e,
        "q_rope": 0,
        "k_rope": 0,
        "cache_kv_write": na * kv_token,
        "attention": na * kv_token * context,
        "output_gate": 0,
        "o_proj": na * mat(H, q_width),
        "dn_in_proj": nd * mat(dn_in_rows, H),
        "conv": nd * (conv_state + 2 * conv_state),                        # taps; state read and written
        "gates": nd * HV * (f32 + e),                                      # A_log (fp32), dt_bias
        "delta_rule": nd * 2 * HV * c.linear_key_head_dim * c.linear_value_head_dim * f32,
        "gated_rmsnorm": nd * c.linear_value_head_dim * f32,
        "out_proj": nd * mat(H, c.linear_value_dim),
        "attn_residual": 0,
        "ln2": n * H * e,
        "gate_up": n * mat(2 * c.intermediate_size, H),
        "swiglu": 0,
        "down": n * mat(H, c.intermediate_size),
        "mlp_residual": 0,
        "final_norm": H * e,
        "lm_head": mat(c.vocab_size, H) + c.vocab_size * e,                # the tied table; logits written
        "argmax": 0,
        "advance": 0,
    }


# a fused step of the fused and fast levels moves the bytes of the one-kernel-per-operator steps it replaces;
# a slot that takes in a step of its own level's table, the bytes of both (FUSED_SLOT_PARTS)
FUSED_STEP_PARTS = {"qk_prologue": ("q_norm", "k_norm", "cache_kv_write"), "mlp": ("ln2", "gate_up"),
                    "final_residual_norm": ("final_norm",)}
FUSED_SLOT_PARTS = {"fused_rmsnorm_linear.conv": ("dn_in_proj", "conv")}
FOLDED = "(folded into other kernels)"


def slot_bytes(config: Qwen35Config, context: int, dtype=torch.bfloat16, steps=STEPS,
               weight_format: str = "native") -> dict[str, int]:
    """`step_bytes` summed per kernel slot of a decode path: `steps` is a level's step table
    (`engine.plan.LEVELS`), e.g. at the operators level `in_proj` = both in-projections.

    A fused step counts the bytes of the steps it replaces (`FUSED_STEP_PARTS`); a step a kernel takes in
    without a row of its own (ln1's weight in the in-projections; at the fast level the gates and the gated
    norm's weight) goes under `FOLDED`, a few KB a token, so that the values always sum to the token's bytes.
    """
    per_step = step_bytes(config, context, dtype, weight_format)
    out: dict[str, int] = {}
    counted: set[str] = set()
    for s in steps:
        parts = FUSED_SLOT_PARTS.get(s.decode) or FUSED_STEP_PARTS.get(s.name, (s.name,))
        if s.decode and set(parts) <= per_step.keys() and not counted.intersection(parts):
            out[s.decode] = out.get(s.decode, 0) + sum(per_step[p] for p in parts)
            counted.update(parts)
    folded = sum(b for name, b in per_step.items() if name not in counted)
    if folded:
        out[FOLDED] = folded
    return out


def bytes_per_token(config: Qwen35Config, context: int, dtype=torch.bfloat16, weight_format: str = "native") -> int:
    """HBM bytes of one decode token at `context` cached tokens (the new one included): see `step_bytes`."""
    return sum(step_bytes(config, context, dtype, weight_format).values())


def floor_us(config: Qwen35Config, context: int, gbps: float | None = None, dtype=torch.bfloat16,
             weight_format: str = "native") -> float:
    """The bandwidth floor of one decode token in us: its bytes at `gbps` (default: this GPU's measured
    copy bandwidth, `benchmark.ceiling_gbps()`)."""
    if gbps is None:
        if not torch.cuda.is_available():
            raise ValueError("no GPU here to measure the copy bandwidth: pass gbps, e.g. the one on record, "
                             "benchmark.recorded_ceiling().gbps")
        gbps = ceiling_gbps()
    return bytes_per_token(config, context, dtype, weight_format) / (gbps * 1e9) * 1e6
