"""The engine's plan: the steps of a decode token and of a prompt chunk, which kernel slot each runs at each
optimisation level, and what each path fuses. Pure data, computed from the level and the config alone: the
engine fits one `Plan` when it is built (`fitted_plan`), resolves its slots (`ops.py`) and runs it
(`forward.py`); the profiler counts the bytes of the same plan.

Three optimisation levels (the CUDA graph is the engine's separate option), each a `Plan` of `LEVELS`: its
steps (which slot each runs) and, per path, its `Fusions` (which operators share a kernel), which the
engine follows. Each level's steps are an `edit` of the previous level's:
  operators  one kernel per operator of the model (`STEPS`, chapter 19_engine)
  fused      chapters 21_norm_fusion, 23_flash_attention, 24_split_k and 25_flash_decoding (`FUSED_STEPS`):
             ln1 folded into the merged input projection and ln2 into the gate/up projection and its
             SwiGLU (both at decode), the last residual add into the final norm;
             split-K for the narrow decode GEMVs (o_proj / out_proj, down); FlashDecoding at decode and
             FlashAttention at prefill
  fast       the fewest kernels (`FAST_STEPS`, chapter 22_layer_fusion): see the comment above it
Every Qwen3.5 text config runs at every level: where its shapes do not fit a fused kernel (a value head dim
that is not a power of two, heads wider than FlashAttention's tile), the level runs the plain kernels for
those steps (`FALLBACKS`, named in the engine's summary); what no level runs is refused (`LIMITS`).

8-bit weights (`fitted_plan(..., weight_format="int8" | "int8_group" | "fp8")`, chapter 31_weight_quant): every
projection and the LM head run the dequantizing kernels, `quant_gemm` over a prompt and `quant_gemv` at decode
(`quant_plan`), except the fast level's decode. At the fused level the kernels that read a projection's weight
in the model dtype (the norm-folded projections, gate/up with its SwiGLU, split-K) fall back to the plain quant
kernels, ln1, ln2 and the SwiGLU to kernels of their own (a line in `fallbacks`); FlashAttention, FlashDecoding
and the final residual norm stay. The fast level's decode kernels that read a projection's weight (the
norm-folded in-projections, with the conv's step; ln2 + gate/up + SwiGLU; the output projections with the
residual add, out_proj with the gated norm) take per-row-scaled weights (`W_SCALED`: each row's sum times its
scale), so its decode step runs the same 138 kernels from int8 or fp8 (`FAST_FORMATS`), the LM head on
`quant_gemv`; its prompts run `quant_gemm` unfused, the SwiGLU and the residual adds as kernels of their own (a
line in `fallbacks`). Per-group int8 scales change along K, inside a row's sum: the fast level refuses
`int8_group` rather than run the fused level in disguise.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Union

from ..config import ConfigError
from ..validate import check_weight_format as check_weight_format_value


@dataclass(frozen=True)
class Step:
    """One row of a level's table: a step of a decode token or a prompt chunk, and the kernel slot each path
    runs for it (the ladder of chapter 29_naive_to_fast climbs `ladder.rungs.Rung`s, another thing)."""
    name: str
    where: str            # "model", "every layer", "attention layers", "DeltaNet layers", "sampling"
    prefill: str | None   # slot of the prefill path (None: not in that path)
    decode: str | None


STEPS = (
    Step("embedding", "model", "embedding", "embedding"),
    Step("ln1", "every layer", "ln1", "ln1"),
    Step("attn_in_proj", "attention layers", "in_proj.prefill", "in_proj"),
    Step("q_norm", "attention layers", "qk_norm", "qk_norm"),
    Step("k_norm", "attention layers", "qk_norm", "qk_norm"),
    Step("q_rope", "attention layers", "q_rope", "q_rope"),
    Step("k_rope", "attention layers", "k_rope", "k_rope"),
    Step("cache_kv_write", "attention layers", "cache_kv_write", "cache_kv_write"),
    Step("attention", "attention layers", "prefill_attention", "decode_attention"),
    Step("output_gate", "attention layers", "output_gate", "output_gate"),
    Step("o_proj", "attention layers", "out_proj.prefill", "out_proj"),
    Step("dn_in_proj", "DeltaNet layers", "in_proj.prefill", "in_proj"),
    Step("conv", "DeltaNet layers", "conv1d_l2norm.prefill", "conv1d_l2norm.decode"),
    Step("gates", "DeltaNet layers", "deltanet_gates", "deltanet_gates"),
    Step("delta_rule", "DeltaNet layers", "gated_delta_chunked", "gated_delta_recurrent"),
    Step("gated_rmsnorm", "DeltaNet layers", "gated_rmsnorm", "gated_rmsnorm"),
    Step("out_proj", "DeltaNet layers", "out_proj.prefill", "out_proj"),
    Step("attn_residual", "every layer", "attn_residual", "attn_residual"),
    Step("ln2", "every layer", "ln2", "ln2"),
    Step("gate_up", "every layer", "gate_up.prefill", "gate_up"),
    Step("swiglu", "every layer", "swiglu.merged", "swiglu.merged"),
    Step("down", "every layer", "down.prefill", "down"),
    Step("mlp_residual", "every layer", "mlp_residual", "mlp_residual"),
    Step("final_norm", "model", "ln2", "ln2"),
    Step("lm_head", "model", "lm_head", "lm_head"),
    Step("argmax", "model", "argmax", "argmax"),
    Step("sample", "sampling", "sample", "sample"),
    Step("advance", "model", None, "advance_positions"),
)

Edit = Union[dict, Step, tuple, None]


def edit(steps: tuple[Step, ...], changes: dict[str, Edit]) -> tuple[Step, ...]:
    """`steps` with the rows named in `changes` edited in place: a dict changes fields of the row, a Step
    takes its place, a tuple of them puts those rows there (a dict in it: the row itself, changed), None
    removes it."""
    unknown = sorted(set(changes) - {s.name for s in steps})
    if unknown:
        raise KeyError(f"no steps {unknown} to edit")
    rows = []
    for step in steps:
        change = changes.get(step.name, step)
        for new in change if isinstance(change, tuple) else () if change is None else (change,):
            rows.append(replace(step, **new) if isinstance(new, dict) else new)
    return tuple(rows)


# The fused level: the operators level with these rows changed. Per layer at decode, 3 slot calls fewer
# (ln1, ln2 and the SwiGLU folded into the projections); there split-K and FlashDecoding launch two kernels
# each (the pieces, then their merge) for the one they replace, so a decode step launches 1 kernel fewer per
# DeltaNet layer, as many per attention layer, and 1 fewer for the model's last residual add and final
# norm, now one kernel (Qwen3.5-0.8B: 317 kernels per token instead of 336, as counted in
# results/engine_nvidia-h200_2026-12-02/bench.md). FlashDecoding buys time per kernel on long caches (every
# SM busy); split-K was meant to do the same for the narrow GEMVs, but measured slower than the plain GEMV at
# every decode shape (docs/results.md section 8): the level keeps it as the course's split-K in the model, and
# the fast level runs plain GEMVs there.
# At prefill ln1 and ln2 stay kernels of their own at every level: at M = 128 the norm-folded GEMMs are
# slower than the norm and the plain GEMM together (chapter 21_norm_fusion; results/kernels_nvidia-h200_2026-11-30.md).
FUSED_STEPS = edit(STEPS, {
    "ln1": {"decode": None},
    "attn_in_proj": {"decode": "fused_rmsnorm_linear"},
    "attention": {"prefill": "flash_attention", "decode": "flash_decoding"},
    "o_proj": {"decode": "splitk_gemv"},
    "dn_in_proj": {"decode": "fused_rmsnorm_linear"},
    "out_proj": {"decode": "splitk_gemv"},
    "ln2": {"decode": None},
    "gate_up": Step("mlp", "every layer", "fused_gate_up_silu.merged", "fused_gate_up_silu.ln2"),
    "swiglu": None,
    "down": {"decode": "splitk_gemv"},
    "mlp_residual": {"where": "every layer but the last"},
    "final_norm": Step("final_residual_norm", "model", "residual_rmsnorm", "residual_rmsnorm"),
})

# The fast level: the fused level with the residual add after each output projection (o_proj, out_proj, down) moved
# into that projection's epilogue, plain GEMVs for them rather than split-K (at 1024 output rows a GEMV already has
# 256-512 programs for the 132 SMs: 4 rows a program with PDL, 2 without), an attention layer's q/k norms, RoPE and
# cache write in one kernel, its output gate inside the attention (FlashAttention's epilogue, FlashDecoding's
# merge), and at decode the DeltaNet conv's step inside the in-projection's epilogue (a program owns whole output
# channels, so their conv state too; the L2 norm of q and k, which needs whole heads, moves into the recurrence),
# the gates inside the recurrent delta rule and the gated RMSNorm inside out_proj. A decode step of Qwen3.5-0.8B
# launches 138 kernels. At a prompt the gates go into the chunked rule's first kernel and the gated RMSNorm into its
# last one's epilogue. In fp16 the residual stream is fp32 and a norm-folded projection reads a scaled fp16 copy of
# it, which `residual_rmsnorm` writes: there the projections add a zero residual and the add stays in that kernel,
# as at the fused level.
FAST_STEPS = edit(FUSED_STEPS, {
    "q_norm": Step("qk_prologue", "attention layers", "qk_norm_rope_cache", "qk_norm_rope_cache"),
    "k_norm": None, "q_rope": None, "k_rope": None, "cache_kv_write": None,
    "attention": {"prefill": "flash_attention.gated", "decode": "flash_decoding.gated"},
    "output_gate": None,
    "o_proj": {"prefill": "fused_linear_residual", "decode": "fused_linear_residual"},
    "dn_in_proj": {"decode": "fused_rmsnorm_linear.conv"},
    "conv": {"decode": None},
    "gates": None,
    "delta_rule": {"prefill": "gated_delta_chunked.gates", "decode": "gated_delta_recurrent_gates"},
    "gated_rmsnorm": None,
    "out_proj": {"prefill": "fused_linear_residual", "decode": "gated_norm_linear_residual"},
    "attn_residual": None,
    "down": {"prefill": "fused_linear_residual", "decode": "fused_linear_residual"},
    "mlp_residual": None,
    "final_residual_norm": (Step("final_norm", "model (bf16, fp32)", "ln2", "ln2"),
                            {"where": "every layer (fp16)"}),
})


@dataclass(frozen=True)
class Fusions:
    """What one path of a level (the prompt chunks, or the decode step) runs in one kernel that the
    operators level runs in several; all False: one kernel per operator. The engine's code follows these
    (the steps say which kernel each step runs)."""
    norm_into_projection: bool = False        # ln1 into the merged in-projection, ln2 into gate/up + SwiGLU
    swiglu_into_gate_up: bool = False         # the SwiGLU in the gate/up projection's epilogue
    # the last layer's residual add and the final norm in one kernel (`residual_rmsnorm`), run with the last
    # layer (every row of every chunk); in fp16 every residual add runs there (a zero weight), also writing
    # a.h, the stream's fp16 copy scaled to unit RMS, which the norms that read the stream then read
    residual_into_final_norm: bool = False
    residual_in_epilogue: bool = False        # o_proj, out_proj and down add the stream (fp16: a zero residual)
    rope_cache_write_into_qk_norm: bool = False   # q/k norms, RoPE and the KV cache write in one kernel
    output_gate_into_attention: bool = False  # the sigmoid output gate in the attention's epilogue / merge
    # the conv's step in the DeltaNet in-projection's epilogue, q and k then L2-normalised in the recurrence
    conv_into_in_proj: bool = False
    gates_into_delta_rule: bool = False       # the DeltaNet gates (beta, g) inside the delta rule
    gated_norm_into_delta_rule: bool = False  # the gated RMSNorm in the chunked rule's last kernel
    gated_norm_into_out_proj: bool = False    # the gated RMSNorm in out_proj's prologue

    # fusion -> the fusions it needs, where the kernel that does it does those too (or reads what they write)
    NEEDS = {"norm_into_projection": ("swiglu_into_gate_up", "residual_into_final_norm"),
             "residual_in_epilogue": ("residual_into_final_norm",),
             "conv_into_in_proj": ("norm_into_projection", "gates_into_delta_rule"),
             "gated_norm_into_delta_rule": ("gates_into_delta_rule",),
             "gated_norm_into_out_proj": ("residual_in_epilogue",)}

    def __post_init__(self):
        for fusion, needs in self.NEEDS.items():
            missing = [n for n in needs if getattr(self, fusion) and not getattr(self, n)]
            if missing:
                raise ValueError(f"{fusion} needs {missing}")
        if self.gated_norm_into_delta_rule and self.gated_norm_into_out_proj:
            raise ValueError("the gated RMSNorm goes into the delta rule or into out_proj, not both")

    def called(self, path: str) -> set[str]:
        """The steps the engine calls on `path` with these fusions: what a level's table must hold there."""
        names = {"embedding", "attn_in_proj", "attention", "o_proj", "dn_in_proj", "delta_rule", "out_proj", "down",
                 "lm_head", "argmax", "sample", *(("advance",) if path == "decode" else ())}
        names |= set() if self.norm_into_projection else {"ln1", "ln2"}
        names |= ({"qk_prologue"} if self.rope_cache_write_into_qk_norm
                  else {"q_norm", "k_norm", "q_rope", "k_rope", "cache_kv_write"})
        names |= set() if self.output_gate_into_attention else {"output_gate"}
        names |= set() if self.conv_into_in_proj else {"conv"}
        names |= set() if self.gates_into_delta_rule else {"gates"}
        names |= set() if self.gated_norm_into_delta_rule or self.gated_norm_into_out_proj else {"gated_rmsnorm"}
        names |= {"mlp"} if self.swiglu_into_gate_up else {"gate_up", "swiglu"}
        names |= set() if self.residual_in_epilogue else {"attn_residual", "mlp_residual"}
        names |= {"final_residual_norm"} if self.residual_into_final_norm else set()
        names |= {"final_norm"} if self.residual_in_epilogue or not self.residual_into_final_norm else set()
        return names


@dataclass(frozen=True)
class Plan:
    """An optimisation level: its steps (the slot each runs on each path) and what each path fuses. A plan
    fitted to a config (`fitted_plan`) also says which of its steps run the plain kernels there and why
    (`fallbacks`): the engine fits its plan once and everything after it (the op table, the profiler's
    byte count, the summary) reads that one object."""
    steps: tuple[Step, ...] = field(repr=False)
    prefill: Fusions
    decode: Fusions
    fallbacks: tuple[str, ...] = ()

    def __post_init__(self):
        for path in ("prefill", "decode"):
            names = {s.name for s in self.steps if getattr(s, path)}
            want = getattr(self, path).called(path)
            if names != want:
                raise ValueError(f"the {path} steps do not match the {path} fusions: steps without a call "
                                 f"{sorted(names - want)}, calls without a step {sorted(want - names)}")


# Each level's fusions, as edits of the previous level's
_FUSED_PREFILL = Fusions(swiglu_into_gate_up=True, residual_into_final_norm=True)
_FUSED_DECODE = replace(_FUSED_PREFILL, norm_into_projection=True)
_FAST = dict(residual_in_epilogue=True, rope_cache_write_into_qk_norm=True, output_gate_into_attention=True,
             gates_into_delta_rule=True)

LEVELS = {
    "operators": Plan(STEPS, prefill=Fusions(), decode=Fusions()),
    "fused": Plan(FUSED_STEPS, prefill=_FUSED_PREFILL, decode=_FUSED_DECODE),
    "fast": Plan(FAST_STEPS, prefill=replace(_FUSED_PREFILL, **_FAST, gated_norm_into_delta_rule=True),
                 decode=replace(_FUSED_DECODE, **_FAST, conv_into_in_proj=True, gated_norm_into_out_proj=True)),
}

# Shapes the course's kernels take at every level: the delta rule keeps a [key dim, value dim] slice of the
# state in registers (solutions/delta_rule.py, MAX_HEAD_DIM), the RMSNorms a whole row (solutions/rmsnorm.py,
# MAX_DIM: ln1 at every level's prefill, q/k norms). A config beyond them is refused before any work.
LIMITS = (("hidden_size", 32768, "the RMSNorm kernels keep a whole row in registers"),
          ("head_dim", 32768, "the q/k RMSNorm kernels keep a whole head in registers"),
          ("linear_key_head_dim", 256, "the delta-rule kernels keep a slice of the state in registers"),
          ("linear_value_head_dim", 256, "the delta-rule kernels keep a slice of the state in registers"))


def check_limits(config) -> None:
    """Raise ConfigError naming the first field beyond what every level's kernels take (`LIMITS`)."""
    for name, most, why in LIMITS:
        value = getattr(config, name)
        if value > most:
            raise ConfigError(f"{name} = {value}: the engine runs at most {most} at every level ({why})")


@dataclass(frozen=True)
class Fallback:
    """Steps of a level whose fused kernels cannot take some configs' shapes, and the plain kernels that
    replace them there: `steps` edits the level's steps (as `edit` does), `fusions` the fusions of a path
    ({path: {fusion: False}}) that those plain kernels undo."""
    levels: tuple[str, ...]
    what: str                                   # the part of the model, for the engine's summary
    misfit: Callable                            # config -> why the fused kernels do not fit, or None
    steps: dict[str, Edit]
    fusions: dict[str, dict[str, bool]] = field(default_factory=dict)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _deltanet_decode_misfit(c) -> str | None:
    """The fast level's decode DeltaNet kernels (solutions/norm_fusion.py, solutions/layer_fusion.py): the
    conv's step inside the in-projection holds a power-of-two window of at least 2 taps, the gated norm
    inside out_proj splits a tile into power-of-two heads."""
    if not c.linear_layers:
        return None
    why = []
    if not (c.linear_conv_kernel_dim >= 2 and _power_of_two(c.linear_conv_kernel_dim)):
        why.append(f"linear_conv_kernel_dim {c.linear_conv_kernel_dim} is not a power of two >= 2")
    if not _power_of_two(c.linear_value_head_dim):
        why.append(f"linear_value_head_dim {c.linear_value_head_dim} is not a power of two")
    return "; ".join(why) or None


def _flash_attention_misfit(c) -> str | None:
    """FlashAttention keeps a whole head in one tile (solutions/flash_attention.py, MAX_HEAD_DIM)."""
    if c.attention_layers and c.head_dim > 256:
        return f"head_dim {c.head_dim} is over FlashAttention's 256"
    return None


FALLBACKS = (
    # the fused level's decode DeltaNet kernels, out_proj still adding the residual stream in its epilogue
    Fallback(("fast",), "DeltaNet decode", _deltanet_decode_misfit, {
        "dn_in_proj": {"decode": "fused_rmsnorm_linear"},
        "conv": ({"decode": "conv1d_l2norm.decode"}, Step("gates", "DeltaNet layers", None, "deltanet_gates")),
        "delta_rule": ({"decode": "gated_delta_recurrent"},
                       Step("gated_rmsnorm", "DeltaNet layers", None, "gated_rmsnorm")),
        "out_proj": {"decode": "fused_linear_residual"},
    }, {"decode": dict(conv_into_in_proj=False, gates_into_delta_rule=False, gated_norm_into_out_proj=False)}),
    Fallback(("fused",), "attention prefill", _flash_attention_misfit, {
        "attention": {"prefill": "prefill_attention"},
    }),
    Fallback(("fast",), "attention prefill", _flash_attention_misfit, {
        "attention": ({"prefill": "prefill_attention"},
                      Step("output_gate", "attention layers", "output_gate", None)),
    }, {"prefill": dict(output_gate_into_attention=False)}),
)


# the formats of 8-bit weights (reference/quant.py's FORMATS) -> the suffix of their quant slots (slots/quant.py)
QUANT_SLOTS = {"int8": "", "int8_group": ".group", "fp8": ".fp8"}
QUANT_LEVELS = ("operators", "fused", "fast")      # the levels that run 8-bit weights (see the module doc)
FAST_FORMATS = ("int8", "fp8")      # the fast level's fused kernels take one scale a row, not a row's groups


def runs_weights(level: str, weight_format: str) -> bool:
    """Whether `level` runs weights of `weight_format` (a known one): every level the model dtype, the
    `QUANT_LEVELS` 8-bit ones, the fast level those of `FAST_FORMATS` only."""
    return weight_format == "native" or (level in QUANT_LEVELS
                                         and (level != "fast" or weight_format in FAST_FORMATS))


def check_weight_format(level: str, weight_format: str, name: str = "weight_format") -> None:
    """ValueError in one line for a format the engine does not know (naming the argument `name`), or one the
    level does not run (`runs_weights`)."""
    plan_of(level)
    if not runs_weights(level, check_weight_format_value(weight_format, name)):
        raise ValueError(f"level {level!r} does not run {weight_format} weights (its fused kernels take one scale "
                         f"a weight row, not a row's groups): use 'int8' or 'fp8', or level 'operators' or 'fused'")


def quant_plan(plan: Plan, level: str, weight_format: str) -> Plan:
    """`plan` with every projection and the LM head on the quant kernels of `weight_format`; at the fused level
    the norm-folded projections and gate/up + SwiGLU undone; at the fast level the decode step's fused kernels
    kept (they take the row scales) and the prompt's projections unfused (see the module doc)."""
    sfx = QUANT_SLOTS[weight_format]
    gemm, gemv = f"quant_gemm{sfx}", f"quant_gemv{sfx}"
    if level == "fast":
        return _fast_quant_plan(plan, weight_format, gemm, gemv)
    changes: dict[str, Edit] = {name: {"prefill": gemm, "decode": gemv}
                                for name in ("attn_in_proj", "dn_in_proj", "o_proj", "out_proj", "down")}
    changes["lm_head"] = {"prefill": gemv, "decode": gemv}          # the last position's row only
    gate_up = Step("gate_up", "every layer", gemm, gemv)
    if level == "operators":
        changes["gate_up"] = gate_up
        return replace(plan, steps=edit(plan.steps, changes))
    changes.update({"ln1": {"decode": "ln1"}, "ln2": {"decode": "ln2"},
                    "mlp": (gate_up, Step("swiglu", "every layer", "swiglu.merged", "swiglu.merged"))})
    unfused = dict(norm_into_projection=False, swiglu_into_gate_up=False)
    return replace(plan, steps=edit(plan.steps, changes), prefill=replace(plan.prefill, **unfused),
                   decode=replace(plan.decode, **unfused),
                   fallbacks=(*plan.fallbacks, f"projections: plain {weight_format} kernels (no fused kernel reads "
                                               "8-bit weights; ln1, ln2 and the SwiGLU run on their own)"))


def _fast_quant_plan(plan: Plan, weight_format: str, gemm: str, gemv: str) -> Plan:
    """The fast level with 8-bit weights: the decode step as it is but for the LM head (`quant_gemv`), whose
    kernels take the row scales; at a prompt `quant_gemm` for every projection, so gate/up's SwiGLU and the
    residual adds after o_proj / out_proj and down are kernels of their own again (the last layer's add stays
    in the final norm, which then runs `residual_rmsnorm`)."""
    changes: dict[str, Edit] = {name: {"prefill": gemm} for name in ("attn_in_proj", "dn_in_proj", "o_proj")}
    changes.update({
        "out_proj": ({"prefill": gemm}, Step("attn_residual", "every layer", "attn_residual", None)),
        "mlp": (Step("gate_up", "every layer", gemm, None), Step("swiglu", "every layer", "swiglu.merged", None),
                {"prefill": None}),
        "down": ({"prefill": gemm}, Step("mlp_residual", "every layer but the last", "mlp_residual", None)),
        "final_norm": {"prefill": None},
        "final_residual_norm": {"where": "model (prompts); every layer (fp16)"},
        "lm_head": {"prefill": gemv, "decode": gemv},               # the last position's row only
    })
    prefill = replace(plan.prefill, swiglu_into_gate_up=False, residual_in_epilogue=False)
    return replace(plan, steps=edit(plan.steps, changes), prefill=prefill,
                   fallbacks=(*plan.fallbacks, f"prompt projections: plain {weight_format} GEMMs (the fused GEMMs "
                                               "read weights in the model dtype; the SwiGLU and the residual adds "
                                               "run on their own)"))


def fitted_plan(level: str, config=None, weight_format: str = "native") -> Plan:
    """The plan of `level` for `config`: `FALLBACKS` applied where its shapes do not fit a fused kernel, one
    line per fallback in `fallbacks` saying what runs the plain kernels and why; with 8-bit weights, the quant
    kernels for the projections (`quant_plan`; a level that runs none refused). No config: the level as it
    is."""
    plan = plan_of(level)
    check_weight_format(level, weight_format)
    for fallback in FALLBACKS:
        why = config is not None and level in fallback.levels and fallback.misfit(config)
        if why:
            paths = {path: replace(getattr(plan, path), **undone) for path, undone in fallback.fusions.items()}
            plan = replace(plan, steps=edit(plan.steps, fallback.steps), **paths,
                           fallbacks=(*plan.fallbacks, f"{fallback.what}: plain kernels ({why})"))
    return plan if weight_format == "native" else quant_plan(plan, level, weight_format)


def slots_of(steps) -> list[str]:
    """The slots of `steps`, each once, in the order the steps first name them."""
    return list(dict.fromkeys(s for step in steps for s in (step.prefill, step.decode) if s))


def slot_names(level: str = "operators") -> list[str]:
    """Every slot the engine uses at this level."""
    return slots_of(steps_of(level))


def plan_of(level: str) -> Plan:
    """The plan of one level (`LEVELS`), checked."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {tuple(LEVELS)}, got {level!r}")
    return LEVELS[level]


def steps_of(level: str) -> tuple[Step, ...]:
    """The steps of one level (`LEVELS`), checked."""
    return plan_of(level).steps


def levels_markdown(weight_format: str = "native") -> str:
    """Which slot every step runs at each level, prefill / decode, side by side (markdown; "-": the
    level has no such step). A step of one level only sits after the step that precedes it there. With 8-bit
    `weight_format`: the levels that run it (`runs_weights`), as `quant_plan` changes them."""
    levels = {level: plan if weight_format == "native" else fitted_plan(level, None, weight_format)
              for level, plan in LEVELS.items() if runs_weights(level, weight_format)}
    order = [s.name for s in STEPS]
    for plan in levels.values():
        for i, s in enumerate(plan.steps):
            if s.name not in order:
                order.insert(order.index(plan.steps[i - 1].name) + 1 if i else 0, s.name)
    by_name = {level: {s.name: s for s in plan.steps} for level, plan in levels.items()}

    def cell(step):
        return "-" if step is None else " / ".join(f"`{n}`" if n else "-" for n in (step.prefill, step.decode))

    lines = ["| step | " + " | ".join(f"{level}: prefill / decode" for level in levels) + " |",
             "|---" * (len(levels) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(by_name[level].get(name)) for level in levels) + " |"
              for name in order]
    return "\n".join(lines)
