"""Weights merged once at load: one matrix per projection group, so a decode step reads each with one GEMV.

A decode GEMV is bound by the weight bytes it reads, plus about a microsecond of launch and ramp-up per
call. The checkpoint stores the inputs of a layer's mixer and MLP as separate matrices; stacked along
their rows they are one read instead of two to four:

- attention: q_proj [2 * heads * head_dim] + k_proj + v_proj -> [5120, 1024]. q_proj interleaves each
  head's query and gate rows ([q_0 | g_0 | q_1 | g_1 ...]); the merge gathers them as [all q | all gates]
  so that at decode every piece of the output (q, gate, k, v) is a contiguous slice.
- DeltaNet: in_proj_qkv [6144] + in_proj_z [2048] + in_proj_b [16] + in_proj_a [16] -> [8224, 1024].
- MLP: gate_proj [3584] + up_proj [3584] -> [7168, 1024] (the SwiGLU reads the two halves).

Prefill (many tokens) multiplies by the merged matrix too, one GEMM per group: the output [T, 5120] or
[T, 8224] holds the pieces side by side, and the kernels after it read each piece as a column view,
each token's piece contiguous and the tokens a whole row apart.

8-bit weights (`Engine(weight_format=...)`, chapter 31_weight_quant): each merged matrix, o_proj / out_proj, down
and a copy of the LM head are quantized as they are merged (`Quantized`: q and fp32 scales), one layer at a time, so the
high-precision merged copy of only one matrix lives at once and none is kept. Per-row (and per-row-and-group)
scales make quantizing the merged matrix the same as quantizing each checkpoint matrix and stacking them. The
embedding table stays in the model dtype: its rows are gathered, not multiplied, and it is tied to the head.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config import Qwen35Config
from ..reference.quant import quantize
from ..triton_helpers import FP8_CAPABILITY, gpu_of

GROUP_SIZE = 128    # int8_group: the columns one scale covers (chapter 31_weight_quant's choice)


@dataclass
class Quantized:
    """An 8-bit projection weight: q [N, K] (int8 or float8_e4m3fn) and fp32 scales, [N] per row or
    [N, ceil(K / group_size)] per group (`group_size` None: per row); what `quant_gemv` / `quant_gemm` take."""
    q: torch.Tensor
    scale: torch.Tensor
    group_size: int | None

    @classmethod
    def of(cls, weight: torch.Tensor, fmt: str) -> "Quantized":
        q, scale, group_size = quantize(weight, fmt, GROUP_SIZE)
        return cls(q.contiguous(), scale.contiguous(), group_size)

    @property
    def shape(self) -> torch.Size:     # a weight's shape, as readers of the merged shapes (targets.py) take it
        return self.q.shape

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.q, self.scale


def check_fp8(weight_format: str, device: torch.device) -> None:
    """fp8 weights on a GPU without fp8 conversions (before sm_89): a ValueError before anything is allocated
    (the quant kernels would refuse them at the first call)."""
    gpu = gpu_of(device)
    if weight_format == "fp8" and gpu is not None and not gpu.fp8:
        raise ValueError(f"weight_format='fp8' needs an sm_{FP8_CAPABILITY}+ GPU; this one ({gpu.name}) is "
                         f"sm_{gpu.capability}: use 'int8' or 'int8_group'")


def projection_args(weight) -> dict:
    """The keyword arguments of a projection slot for `weight`: the tensor, or an 8-bit weight's q, scales and
    group size (the quant slots' signature)."""
    if isinstance(weight, Quantized):
        return {"weight": weight.q, "scale": weight.scale, "group_size": weight.group_size}
    return {"weight": weight}


def fused_weight_args(weight, name: str = "weight") -> dict:
    """The keyword arguments of a fused kernel's weight (the fast level's decode kernels): the tensor as `name`,
    or an 8-bit weight's q as `name` and its row scales as `scale` (per-row scales only: `plan.FAST_FORMATS`)."""
    if isinstance(weight, Quantized):
        return {name: weight.q, "scale": weight.scale}
    return {name: weight}


def _tensors(weight) -> tuple[torch.Tensor, ...]:
    return weight.tensors() if isinstance(weight, Quantized) else (weight,)


@dataclass
class Merged:
    weight: torch.Tensor | Quantized              # [sum of rows, in_features]
    pieces: dict[str, tuple[int, int]]            # name -> (first row, end row)

    @classmethod
    def stack(cls, parts: dict[str, torch.Tensor], fmt: str = "native") -> "Merged":
        pieces, start = {}, 0
        for name, w in parts.items():
            pieces[name] = (start, start + w.shape[0])
            start += w.shape[0]
        return cls(_converted(torch.cat(list(parts.values())).contiguous(), fmt), pieces)


@dataclass
class LayerWeights:
    kind: str                                     # "linear_attention" or "full_attention"
    ln1: torch.Tensor
    ln2: torch.Tensor
    mixer_in: Merged                              # attention: q|gate|k|v; DeltaNet: qkv|z|b|a
    mixer_out: torch.Tensor | Quantized           # o_proj / out_proj [hidden, heads * head_dim]
    gate_up: Merged                               # gate|up
    down: torch.Tensor | Quantized
    small: dict[str, torch.Tensor] = field(default_factory=dict)   # norms, conv taps, A_log, dt_bias


@dataclass
class EngineWeights:
    embed: torch.Tensor
    lm_head: torch.Tensor | Quantized             # 8-bit: a quantized copy of the tied table
    norm: torch.Tensor
    layers: list[LayerWeights]
    format: str = "native"                        # one of WEIGHT_FORMATS

    def nbytes(self) -> int:
        tensors = {id(t): t for t in (self.embed, *_tensors(self.lm_head), self.norm)}   # a tied head counts once
        for layer in self.layers:
            for w in (layer.ln1, layer.ln2, layer.mixer_in.weight, layer.mixer_out, layer.gate_up.weight,
                      layer.down, *layer.small.values()):
                for t in _tensors(w):
                    tensors[id(t)] = t
        return sum(t.numel() * t.element_size() for t in tensors.values())


def deinterleave_query_gate(q_proj: torch.Tensor, heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q_proj [heads * 2 * head_dim, hidden], rows [q_0 | g_0 | q_1 | g_1 ...] -> (all q rows, all gate rows)."""
    per_head = q_proj.view(heads, 2, head_dim, q_proj.shape[1])       # [heads, (q, gate), head_dim, hidden]
    return per_head[:, 0].reshape(-1, q_proj.shape[1]), per_head[:, 1].reshape(-1, q_proj.shape[1])


def _converted(weight: torch.Tensor, fmt: str) -> torch.Tensor | Quantized:
    """A projection weight as the engine keeps it: itself ("native"), or quantized to `fmt`."""
    return weight if fmt == "native" else Quantized.of(weight, fmt)


DELTANET_PIECES = ("qkv", "z", "b", "a")   # in_proj_<piece>, stacked in this order


def layer_projections(config: Qwen35Config, i: int) -> dict[str, tuple[str, ...]]:
    """The checkpoint's projection names of layer `i` by the engine matrix they make (`LayerWeights`):
    mixer_in and gate_up stacked from several, mixer_out and down one each (kept as it is when native)."""
    p = f"layers.{i}."
    if config.layer_types[i] == "full_attention":
        a = p + "self_attn."
        names = {"mixer_in": tuple(a + f"{n}_proj.weight" for n in "qkv"), "mixer_out": (a + "o_proj.weight",)}
    else:
        a = p + "linear_attn."
        names = {"mixer_in": tuple(a + f"in_proj_{n}.weight" for n in DELTANET_PIECES),
                 "mixer_out": (a + "out_proj.weight",)}
    m = p + "mlp."
    return {**names, "gate_up": (m + "gate_proj.weight", m + "up_proj.weight"), "down": (m + "down_proj.weight",)}


def merge_bytes(config: Qwen35Config, weights: dict[str, torch.Tensor], fmt: str = "native",
                consume: bool = False) -> int:
    """The most memory `merge_weights` allocates beside the checkpoint's tensors, for the check before it runs.
    Native: the stacked matrices (a single projection is kept, not copied). 8-bit: every projection and the LM
    head's copy at one byte a weight plus fp32 scales (a row's, or a row's per group of GROUP_SIZE), and the
    largest transient of the quantizer: a stacked copy in the model's dtype and an fp32 copy of one matrix.
    Either way an attention layer's query and gate rows are copied apart first (`deinterleave_query_gate`).
    consume (`merge_weights(consume=True)`): a group's matrices leave the checkpoint once merged, freeing at least
    what the group keeps, so the peak is the largest group's own: what it keeps plus its transient."""
    total, transient, peak = 0, 0, 0
    head = weights.get("lm_head.weight", weights["embed_tokens.weight"])
    groups = [(i, kind, names) for i in range(config.num_hidden_layers)
              for kind, names in layer_projections(config, i).items()]
    for i, kind, names in groups + ([(None, "lm_head", ("lm_head.weight",))] if fmt != "native" else []):
        parts = [head if n == "lm_head.weight" else weights[n] for n in names]
        rows, cols, size = sum(t.shape[0] for t in parts), parts[0].shape[1], parts[0].element_size()
        stacked = rows * cols * size if len(parts) > 1 else 0
        # what this group allocates and frees again: the query and gate rows copied apart (attention's mixer_in),
        # and for 8-bit weights the stacked copy and the quantizer's fp32 copy
        passing = parts[0].numel() * size if kind == "mixer_in" and config.layer_types[i] == "full_attention" else 0
        keep = stacked
        if fmt != "native":
            keep = rows * cols + rows * (-(-cols // GROUP_SIZE) if fmt == "int8_group" else 1) * 4
            passing += stacked + rows * cols * 4
        total += keep
        transient = max(transient, passing)
        peak = max(peak, keep + passing)
    return peak if consume else total + transient


def merge_weights(config: Qwen35Config, weights: dict[str, torch.Tensor], fmt: str = "native",
                  consume: bool = False) -> EngineWeights:
    """The engine's weights from the checkpoint's (names without prefix, as `weights.load_weights` gives);
    the projections and the LM head quantized to `fmt` unless it is "native" (see the module doc).
    consume: each layer's projections (and an untied 8-bit LM head) are dropped from `weights` once merged, so
    the merged copies never sit beside the whole checkpoint: for a dict no one else holds
    (`Engine(own_weights=True)`, as `from_pretrained` and `random` build). A 27B's peak is then its weights plus
    one layer's stacked matrix (0.3 GiB, `merge_bytes(consume=True)`), not plus every layer's (31 GiB)."""
    c = config
    layers = []
    for i, kind in enumerate(c.layer_types):
        p = f"layers.{i}."
        names = layer_projections(c, i)
        if kind == "full_attention":
            a = p + "self_attn."
            q_name, k_name, v_name = names["mixer_in"]
            parts = dict(zip(("q", "gate"), deinterleave_query_gate(weights[q_name], c.num_attention_heads,
                                                                     c.head_dim)), k=weights[k_name], v=weights[v_name])
            small = {"q_norm": weights[a + "q_norm.weight"], "k_norm": weights[a + "k_norm.weight"]}
        else:
            a = p + "linear_attn."
            parts = {piece: weights[n] for piece, n in zip(DELTANET_PIECES, names["mixer_in"])}
            small = {"conv": weights[a + "conv1d.weight"].squeeze(1).contiguous(),     # [C, 1, K] -> [C, K]
                     "A_log": weights[a + "A_log"], "dt_bias": weights[a + "dt_bias"],
                     "norm": weights[a + "norm.weight"]}
        gate_name, up_name = names["gate_up"]
        layers.append(LayerWeights(
            kind=kind, ln1=weights[p + "input_layernorm.weight"], ln2=weights[p + "post_attention_layernorm.weight"],
            mixer_in=Merged.stack(parts, fmt), mixer_out=_converted(weights[names["mixer_out"][0]], fmt),
            gate_up=Merged.stack({"gate": weights[gate_name], "up": weights[up_name]}, fmt),
            down=_converted(weights[names["down"][0]], fmt), small=small))
        del parts                      # the query and gate rows copied apart: freed before the next layer's
        if consume:                    # kept tensors (native single projections) live on in `layers`
            for name in (n for group in names.values() for n in group):
                del weights[name]
    embed = weights["embed_tokens.weight"]
    lm_head = _converted(weights.get("lm_head.weight", embed), fmt)
    if consume and fmt != "native":
        weights.pop("lm_head.weight", None)
    return EngineWeights(embed=embed, lm_head=lm_head, norm=weights["norm.weight"], layers=layers, format=fmt)
