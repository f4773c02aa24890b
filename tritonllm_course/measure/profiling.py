"""Profile first: where a decode step of the engine spends its time, and how far each kernel is from the
bytes it must move (chapter 20).

- `step_bytes` / `slot_bytes` / `bytes_per_token`: the HBM bytes one decode token must move, per step of
  the engine, per kernel slot and in total (docs/qwen35.md §6), computed from the config alone;
  `floor_us`: those bytes at the measured copy bandwidth.
- `expected_calls` / `traced_calls`: the kernel slots one decode token calls, predicted from the engine's
  step table (`engine.plan.STEPS`) and recorded with `engine.tracing()` (works on the CPU).
- `decode_breakdown` (GPU only): torch.profiler over a few decode steps, launched op by op and replayed
  from the CUDA graph; every kernel of the trace attributed to the slot that launched it; GPU time per
  token, per kernel and per slot, against the wall time per token and against the bytes of each slot. A
  kernel's time is its stretch of the timeline (`timeline_us`): its duration, or under PDL, where a kernel
  starts before the one ahead of it ends, the time it adds after that end, so the times add up to the
  GPU's busy time.
- `traced_prefill_calls` / `prefill_breakdown` (GPU only): the same for a prompt, per prompt.
- per layer: `layer_tracing` (each traced call with its part of the step: the embedding, layer i, the
  head), `place_kernels` (each kernel of a trace on the call that launched it) and `check_attribution`,
  `check_layers` (a trace, or a labelling, that does not fit the calls is refused); `layer_times.py` uses
  them to time the engine per layer and per kind of layer.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from ..config import Qwen35Config
from ..engine.engine import TokenReader
from ..engine.plan import LEVELS, STEPS
from ..regions import call_closure
from ..safe_files import atomic_write_text, save_figure

OTHER = "other (not a course kernel)"
EMBEDDING, HEAD = "embedding", "head"    # the parts of a step outside its layers


# --- the byte model ----------------------------------------------------------------------------------------
def step_bytes(config: Qwen35Config, context: int, dtype=torch.bfloat16) -> dict[str, int]:
    """HBM bytes one greedy decode token moves in each step of the engine (`engine.plan.STEPS` names), all
    the step's calls of the token together.

    Counted as docs/qwen35.md §6 does: every weight read once (matrices, norms, conv taps, `A_log`,
    `dt_bias`) in `dtype`, except `A_log` and the gated norm's weight, which the checkpoint keeps in fp32;
    the DeltaNet conv state (model dtype) and recurrent state (fp32), each read and written; the KV cache:
    the new token's K and V written (`cache_kv_write`) and `context` tokens' K and V read (`attention`), where
    `context` is the cache length the step attends to, the new token included; the logits written by the
    LM head; one embedding row. Not counted: activations (under 0.1 MB a token: the residual stream, the
    projections' outputs, the logits' re-read by the argmax) and the RoPE tables' rows.
    For Qwen3.5-0.8B in bf16 the total is 1,544,820,416 + 12,288 * context.
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
    return {
        "embedding": H * e,
        "ln1": n * H * e,
        "attn_in_proj": na * attn_in_rows * H * e,
        "q_norm": na * c.head_dim * e,
        "k_norm": na * c.head_dim * e,
        "q_rope": 0,
        "k_rope": 0,
        "cache_kv_write": na * kv_token,
        "attention": na * kv_token * context,
        "output_gate": 0,
        "o_proj": na * H * q_width * e,
        "dn_in_proj": nd * dn_in_rows * H * e,
        "conv": nd * (conv_state + 2 * conv_state),                        # taps; state read and written
        "gates": nd * HV * (f32 + e),                                      # A_log (fp32), dt_bias
        "delta_rule": nd * 2 * HV * c.linear_key_head_dim * c.linear_value_head_dim * f32,
        "gated_rmsnorm": nd * c.linear_value_head_dim * f32,
        "out_proj": nd * H * c.linear_value_dim * e,
        "attn_residual": 0,
        "ln2": n * H * e,
        "gate_up": n * 2 * c.intermediate_size * H * e,
        "swiglu": 0,
        "down": n * c.intermediate_size * H * e,
        "mlp_residual": 0,
        "final_norm": H * e,
        "lm_head": c.vocab_size * H * e + c.vocab_size * e,                # the tied table; logits written
        "argmax": 0,
        "advance": 0,
    }


# a fused step of the fused and fast levels moves the bytes of the one-kernel-per-operator steps it replaces;
# a slot that takes in a step of its own level's table, the bytes of both (FUSED_SLOT_PARTS)
FUSED_STEP_PARTS = {"qk_prologue": ("q_norm", "k_norm", "cache_kv_write"), "mlp": ("ln2", "gate_up"),
                    "final_residual_norm": ("final_norm",)}
FUSED_SLOT_PARTS = {"fused_rmsnorm_linear.conv": ("dn_in_proj", "conv")}
FOLDED = "(folded into other kernels)"


def slot_bytes(config: Qwen35Config, context: int, dtype=torch.bfloat16, steps=STEPS) -> dict[str, int]:
    """`step_bytes` summed per kernel slot of a decode path: `steps` is a level's step table
    (`engine.plan.LEVELS`), e.g. at the operators level `in_proj` = both in-projections.

    A fused step counts the bytes of the steps it replaces (`FUSED_STEP_PARTS`); a step a kernel takes in
    without a row of its own (ln1's weight in the in-projections; at the fast level the gates and the gated
    norm's weight) goes under `FOLDED`, a few KB a token, so that the values always sum to the token's bytes.
    """
    per_step = step_bytes(config, context, dtype)
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


def bytes_per_token(config: Qwen35Config, context: int, dtype=torch.bfloat16) -> int:
    """HBM bytes of one decode token at `context` cached tokens (the new one included): see `step_bytes`."""
    return sum(step_bytes(config, context, dtype).values())


def floor_us(config: Qwen35Config, context: int, gbps: float | None = None, dtype=torch.bfloat16) -> float:
    """The bandwidth floor of one decode token in us: its bytes at `gbps` (default: this GPU's measured
    copy bandwidth, `benchmark.ceiling_gbps()`)."""
    if gbps is None:
        if not torch.cuda.is_available():
            raise ValueError("no GPU here to measure the copy bandwidth: pass gbps, e.g. the one on record, "
                             "benchmark.recorded_ceiling().gbps")
        from .benchmark import ceiling_gbps
        gbps = ceiling_gbps()
    return bytes_per_token(config, context, dtype) / (gbps * 1e9) * 1e6


# --- kernel calls per token --------------------------------------------------------------------------------
_PER = {"model": lambda c: 1, "every layer": lambda c: c.num_hidden_layers,
        "attention layers": lambda c: len(c.attention_layers), "DeltaNet layers": lambda c: len(c.linear_layers)}


def expected_calls(config: Qwen35Config, sampling: bool = False) -> Counter:
    """{slot: calls} of one decode token, from the engine's step table: each step runs once per layer of
    its kind (or once per token). Greedy (argmax) unless `sampling`."""
    calls: Counter = Counter()
    for s in STEPS:
        if not s.decode or (s.name == "argmax" and sampling):
            continue
        n = (1 if sampling else 0) if s.where == "sampling" else _PER[s.where](config)
        if n:
            calls[s.decode] += n
    return calls


def _ready_for_decode(engine, prompt_len: int, tokens: int) -> None:
    """Reset the engine and prefill a prompt of `prompt_len` tokens, with room for `tokens` more."""
    if prompt_len + tokens > engine.max_seq_len:
        raise ValueError(f"a {prompt_len}-token prompt and {tokens} decode steps need a cache of "
                         f"{prompt_len + tokens} tokens; the engine holds {engine.max_seq_len} (max_seq_len)")
    engine.reset()
    engine.prefill(_prompt(engine, prompt_len))


def traced_calls(engine, prompt_len: int = 4, layers: bool = False) -> list:
    """The slots one greedy decode step of `engine` calls, in order (`engine.tracing()`; no timing, runs on
    the CPU); with `layers`, each as a `Call` with its part of the step (`layer_tracing`). Resets the
    engine."""
    _ready_for_decode(engine, prompt_len, 1)
    graph, engine.use_graph = engine.use_graph, False     # a graph replay runs no Python: nothing to trace
    try:
        with (layer_tracing(engine) if layers else engine.tracing()) as calls:
            engine.decode()
    finally:
        engine.use_graph = graph
    return list(calls)


def _prompt(engine, prompt_len: int) -> list[int]:
    return [(7 * i + 3) % engine.config.vocab_size for i in range(prompt_len)]


def check_prompt_len(engine, prompt_len: int) -> None:
    if not 1 <= prompt_len <= engine.max_seq_len:
        raise ValueError(f"prompt_len must be 1 to {engine.max_seq_len} (max_seq_len), got {prompt_len}")


# --- which layer each call belongs to ----------------------------------------------------------------------
class Call(NamedTuple):
    """One op call of a traced step: its slot, and its part of the step: a layer index, `EMBEDDING` (before
    the layers) or `HEAD` (after them: the final norm, the LM head, argmax or sampling, the counters)."""
    slot: str
    part: int | str


_MARKED = ("_embed", "_in_proj", "_layers")


@contextlib.contextmanager
def layer_tracing(engine):
    """`engine.tracing()` with the part of the step of every call: `with layer_tracing(engine) as calls:`
    gives [Call] once the block ends. The parts are marked where the engine's code runs them, on the
    instance for the block only: `_embed` starts the embedding, `_in_proj(..., i, ...)` (what every layer
    does first, ln1 included) layer i, the return of `_layers` the head. Each step (a decode step, a
    prompt chunk) must come out as the embedding, layers 0 to n - 1 in order, the head; else RuntimeError."""
    marks: list[tuple[int, int | str]] = []            # (calls made before the mark, the part it starts)
    saved = {name: engine.__dict__[name] for name in _MARKED if name in engine.__dict__}
    embed, in_proj, layers = (getattr(engine, name) for name in _MARKED)
    in_proj_args = inspect.signature(in_proj)
    out: list[Call] = []
    with engine.tracing() as slots:
        def marked_embed(*args, **kwargs):
            marks.append((len(slots), EMBEDDING))
            return embed(*args, **kwargs)

        def marked_in_proj(*args, **kwargs):
            marks.append((len(slots), int(in_proj_args.bind(*args, **kwargs).arguments["i"])))
            return in_proj(*args, **kwargs)

        def marked_layers(*args, **kwargs):
            result = layers(*args, **kwargs)
            marks.append((len(slots), HEAD))
            return result

        engine._embed, engine._in_proj, engine._layers = marked_embed, marked_in_proj, marked_layers
        try:
            yield out
        finally:
            for name in _MARKED:
                engine.__dict__.pop(name, None)
            engine.__dict__.update(saved)
    _check_marks([part for _, part in marks], engine.config.num_hidden_layers)
    for j, slot in enumerate(slots):
        before = [part for n, part in marks if n <= j]
        if not before:
            raise RuntimeError(f"call {j} ({slot}) came before the engine's embedding: no part of a step")
        out.append(Call(slot, before[-1]))


def _check_marks(parts: list, n_layers: int) -> None:
    step = [EMBEDDING, *range(n_layers), HEAD]
    if not parts or len(parts) % len(step) or parts != step * (len(parts) // len(step)):
        raise RuntimeError(f"the engine's steps did not run as the embedding, layers 0 to {n_layers - 1} "
                           f"and the head: {parts[:n_layers + 3]}")


def check_layers(calls: list[Call], steps, layer_kinds: list[str]) -> None:
    """Raise AttributionError where traced calls are labelled with the wrong layers, in any step (a decode
    step, a prompt chunk: each starts at the embedding): a layer of `layer_kinds` (its kind per index:
    "attention" or "DeltaNet") missing; a slot that only one kind's steps run (`steps`: a level's step
    table) in a layer of the other kind; two layers of one kind calling different slots (the last layer may
    stop one call short: its residual add can go to the final norm). Labels shifted by one call against the
    engine's layers fail one of the last two."""
    starts = [j for j, c in enumerate(calls) if c.part == EMBEDDING and (j == 0 or calls[j - 1].part != EMBEDDING)]
    if len(starts) > 1:
        for a, b in zip(starts, starts[1:] + [len(calls)]):
            check_layers(calls[a:b], steps, layer_kinds)
        return
    where: dict[str, set[str]] = {}
    for s in steps:
        for slot in (s.prefill, s.decode):
            if slot:
                where.setdefault(slot, set()).add(s.where)
    only = {"attention layers": "attention", "DeltaNet layers": "DeltaNet"}
    sequences: dict[int, list[str]] = {}
    for c in calls:
        if isinstance(c.part, int):
            sequences.setdefault(c.part, []).append(c.slot)
    missing = [i for i in range(len(layer_kinds)) if i not in sequences]
    if missing or set(sequences) - set(range(len(layer_kinds))):
        raise AttributionError(f"layers {missing} have no calls; labelled: {sorted(sequences)}")
    for i, seq in sequences.items():
        for slot in seq:
            kinds = {only.get(w) for w in where.get(slot, ())}
            if None not in kinds and layer_kinds[i] not in kinds:
                raise AttributionError(f"layer {i} ({layer_kinds[i]}) calls {slot}, which only "
                                       f"{' and '.join(sorted(kinds))} layers run")
    last = len(layer_kinds) - 1
    for kind in set(layer_kinds):
        layers = [i for i, k in enumerate(layer_kinds) if k == kind]
        first = sequences[layers[0]]
        for i in layers[1:]:
            seq = sequences[i]
            same = seq == first or (i == last and len(seq) == len(first) - 1 and seq == first[:-1])
            if not same:
                raise AttributionError(f"{kind} layers {layers[0]} and {i} call different slots: the calls are "
                                       f"labelled with the wrong layers\n  {layers[0]}: {first}\n  {i}: {seq}")


def traced_prefill_calls(engine, prompt_len: int = 128, layers: bool = False) -> list:
    """The slots a `prompt_len`-token prompt calls, in order, op by op (no timing, runs on the CPU); with
    `layers`, each as a `Call` with its part of the prompt (`layer_tracing`). Resets the engine."""
    check_prompt_len(engine, prompt_len)
    graph, engine.use_graph = engine.use_graph, False     # a graph replay runs no Python: nothing to trace
    try:
        engine.reset()
        with (layer_tracing(engine) if layers else engine.tracing()) as calls:
            engine.prefill(_prompt(engine, prompt_len))
    finally:
        engine.use_graph = graph
        engine.reset()
    return list(calls)


# --- which kernel belongs to which slot --------------------------------------------------------------------
def _kernel_name(obj) -> str:
    """The name a Triton kernel has in a profiler trace: its Python function's (through autotuners)."""
    while not inspect.isfunction(obj):
        obj = obj.fn
    return obj.__name__


def kernels_of(fn) -> set[str]:
    """Names of the Triton kernels a host wrapper can launch: the @triton.jit functions its module-level
    call closure refers to (imported ones included)."""
    from triton.runtime.jit import KernelInterface
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = sys.modules.get(getattr(fn, "__module__", ""))
    if module is None or not inspect.isfunction(fn):
        return set()
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError):
        return set()
    closure = call_closure(text, fn.__name__)
    names = set()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in closure:
            for ref in ast.walk(node):
                obj = module.__dict__.get(ref.id) if isinstance(ref, ast.Name) else None
                if isinstance(obj, KernelInterface):
                    names.add(_kernel_name(obj))
    return names


def slot_kernels(engine, path: str = "decode") -> dict[str, set[str]]:
    """{slot of the decode (or "prefill") path: names of the Triton kernels its op can launch} (empty for
    PyTorch ops)."""
    if path not in ("decode", "prefill"):
        raise ValueError(f"path must be 'decode' or 'prefill', got {path!r}")
    path_slots = {getattr(s, path) for s in engine.ops.steps if getattr(s, path)}
    return {name: (set() if op.source == "reference" else kernels_of(op.fn))
            for name, op in engine.ops.ops.items() if name in path_slots}


class AttributionError(ValueError):
    """A trace's kernels and the calls they are attributed to disagree."""


def place_kernels(kernel_names: list[str], calls: list[str], per_slot: dict[str, set[str]],
                  repeats: int) -> list[tuple[int, int] | None]:
    """(run, call index) of each kernel of a trace (in stream order) of `repeats` runs of `calls` (slots,
    in call order), or None where that is not certain.

    A kernel name that every call able to launch it (`per_slot`) launches m times a run: its count in the
    trace is repeats x m x those calls, and its k-th occurrence belongs to the (k // m)-th of them, counted
    over the runs (a call's launches come together: the calls run in stream order). Any other count (a
    name no call launches, a trace that does not fit the calls): None.
    """
    able = {name: [j for j, s in enumerate(calls) if name in per_slot.get(s, ())] for name in set(kernel_names)}
    total, seen = Counter(kernel_names), Counter()
    placed = []
    for name in kernel_names:
        cands = able[name]
        if cands and total[name] % (repeats * len(cands)) == 0:
            k = seen[name] // (total[name] // (repeats * len(cands)))      # which of the calls, over the runs
            placed.append((k // len(cands), cands[k % len(cands)]))
        else:
            placed.append(None)
        seen[name] += 1
    return placed


def attribute(kernel_names: list[str], calls: list[str], per_slot: dict[str, set[str]], tokens: int) -> list[str]:
    """The slot of each kernel of a trace (in stream order) of `tokens` decode steps.

    Its call's slot where `place_kernels` places it (the k-th occurrence of a kernel name belongs to the
    k-th call that can launch it, in the order of `calls`, repeated per token). Otherwise, when a single
    slot can launch it, that slot; else `OTHER`.
    """
    slots_of = []
    for name, where in zip(kernel_names, place_kernels(kernel_names, calls, per_slot, tokens)):
        if where is not None:
            slots_of.append(calls[where[1]])
            continue
        able = {s for s in calls if name in per_slot.get(s, ())}
        slots_of.append(able.pop() if len(able) == 1 else OTHER)
    return slots_of


def check_attribution(kernel_names: list[str], placed: list, calls: list[str], per_slot: dict[str, set[str]],
                      repeats: int) -> None:
    """Raise AttributionError where a trace does not fit the calls `place_kernels` placed it on: a kernel
    that a call's slot can launch left unplaced (its count does not fit the calls); placements out of stream
    order (a kernel of an earlier call, or run, after a later one's); a call whose slot launches course
    kernels (`per_slot`: every slot of the path) with none of them in some run. A call list shifted by one
    against the trace (a call missing, one too many, or the calls rotated) fails one of these."""
    launchable = set().union(*per_slot.values())
    latest, got = None, set()
    for k, (name, where) in enumerate(zip(kernel_names, placed)):
        if where is None:
            if name in launchable:
                n = sum(name in per_slot.get(s, ()) for s in calls)
                raise AttributionError(f"kernel {name}: {kernel_names.count(name)} in the trace of {repeats} "
                                       f"runs, for {n} calls a run that can launch it: the calls do not fit")
            continue
        if latest is not None and where < latest:
            raise AttributionError(f"kernel {k} of the trace ({name}) falls on call {where[1]} ({calls[where[1]]}) "
                                   f"of run {where[0]}, after a kernel of call {latest[1]} "
                                   f"({calls[latest[1]]}) of run {latest[0]}: the calls are out of the trace's order")
        latest = where
        got.add(where)
    for run in range(repeats):
        for j, s in enumerate(calls):
            if per_slot.get(s) and (run, j) not in got:
                raise AttributionError(f"call {j} ({s}) launched no kernel in run {run} of the trace")


# --- the GPU profile ---------------------------------------------------------------------------------------
@dataclass
class Breakdown:
    """One mode's profile: GPU time per token of every kernel and every slot, and the wall time per token."""
    mode: str                                   # "launched op by op" or "CUDA graph"
    tokens: int                                 # decode steps (or prompts) profiled
    wall_us: float                              # per token (prompt), measured without the profiler
    kernels: list[dict] = field(default_factory=list)   # name, slot, calls, us (per token), mean_us, share
    slots: list[dict] = field(default_factory=list)     # slot, calls, us, share, bytes, GB/s, % of ceiling
    per: str = "token"                          # what one of `tokens` is: "token" (decode) or "prompt"

    @property
    def kernel_us(self) -> float:
        """GPU time per token: every kernel's (and copy's) stretch of the timeline, the time the GPU was busy
        (the sum of the durations when nothing overlaps)."""
        return sum(k["us"] for k in self.kernels)

    @property
    def launches(self) -> float:
        return sum(k["calls"] for k in self.kernels)

    def __str__(self) -> str:
        gap = self.wall_us - self.kernel_us
        per = self.per
        lines = [f"{self.mode}: {self.wall_us:.1f} us per {per} (wall), {self.kernel_us:.1f} us of kernels "
                 f"({self.launches:.0f} per {per}), {gap:.1f} us with the GPU idle "
                 f"({100 * gap / self.wall_us:.0f}%)",
                 f"  {'slot':<24} {'calls':>5} {'us/' + per:>9} {'share':>6} {'MB':>8} {'GB/s':>6} {'% ceil':>6}"]
        for r in self.slots:
            mb = f"{r['bytes'] / 1e6:8.2f}" if r["bytes"] is not None else f"{'-':>8}"
            bw = f"{r['GB/s']:6.0f} {r['% of ceiling']:6.1f}" if r["GB/s"] else f"{'-':>6} {'-':>6}"
            lines.append(f"  {r['slot']:<24} {r['calls']:5.0f} {r['us']:9.2f} {100 * r['share']:5.1f}% {mb} {bw}")
        return "\n".join(lines)

    def kernel_table(self, top: int = 15) -> str:
        """The kernels by GPU time per token, as the profiler names them."""
        lines = [f"  {'kernel':<34} {'slot':<22} {'calls':>5} {'us/' + self.per:>9} {'mean us':>8} {'share':>6}"]
        for r in self.kernels[:top]:
            lines.append(f"  {r['name'][:34]:<34} {r['slot'][:22]:<22} {r['calls']:5.0f} {r['us']:9.2f} "
                         f"{r['mean_us']:8.2f} {100 * r['share']:5.1f}%")
        return "\n".join(lines)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731


def _tables(names: list[str], durations: list[float], owners: list[str], tokens: int,
            nbytes: dict[str, int], gbps: float) -> tuple[list[dict], list[dict]]:
    total = sum(durations) or 1.0
    per_kernel: dict[tuple[str, str], list[float]] = {}
    for name, us, slot in zip(names, durations, owners):
        per_kernel.setdefault((name, slot), []).append(us)
    kernels = sorted(({"name": n, "slot": s, "calls": len(t) / tokens, "us": sum(t) / tokens,
                       "mean_us": sum(t) / len(t), "share": sum(t) / total} for (n, s), t in per_kernel.items()),
                     key=lambda r: -r["us"])
    per_slot: dict[str, list[float]] = {}
    for us, slot in zip(durations, owners):
        per_slot.setdefault(slot, []).append(us)
    slots = []
    for slot, t in sorted(per_slot.items(), key=lambda kv: -sum(kv[1])):
        us = sum(t) / tokens
        b = nbytes.get(slot)
        bw = b / (us * 1e-6) / 1e9 if b else None
        slots.append({"slot": slot, "calls": len(t) / tokens, "us": us, "share": sum(t) / total, "bytes": b,
                      "GB/s": bw, "% of ceiling": 100 * bw / gbps if bw else None})
    return kernels, slots


def _profile_mode(engine, graph: bool, tokens: int, prompt_len: int, calls: list[str],
                  per_slot: dict[str, set[str]], nbytes: dict[str, int], gbps: float) -> Breakdown:
    engine.use_graph = graph
    _ready_for_decode(engine, prompt_len, 2 + 2 * tokens)
    return _breakdown(_decode_and_read(engine), tokens, graph, calls, per_slot, nbytes, gbps)


def _decode_and_read(engine) -> Callable[[], None]:
    """One decode step per call as the engine streams: each step queued, then the token of the step
    before it read by the host (`TokenReader`, one step behind)."""
    reader = TokenReader(engine.counters.ids)

    def step():
        engine.decode()
        reader.push()
        if len(reader.queue) == 2:
            reader.pop()
    return step


def _breakdown(run, times: int, graph: bool, calls: list[str], per_slot: dict[str, set[str]],
               nbytes: dict[str, int], gbps: float, per: str = "token") -> Breakdown:
    """`run` twice untimed (compile, autotune, capture), `times` times on the wall clock, then `times`
    times under the profiler, each of its kernels attributed to a slot: one call of `run` is one `per`."""
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(times):
        run()
    torch.cuda.synchronize()                    # `run` may leave its last step in flight (one step ahead)
    wall_us = (time.perf_counter() - t0) * 1e6 / times
    names, durations = _device_trace(run, times)
    kernels, slots = _tables(names, durations, attribute(names, calls, per_slot, times), times, nbytes, gbps)
    return Breakdown("CUDA graph" if graph else "launched op by op", times, wall_us, kernels, slots, per=per)


def _device_trace(run, times: int) -> tuple[list[str], list[float]]:
    """torch.profiler over `times` calls of `run`: the names of the device-side work (kernels, copies and
    memsets, in stream order; not record_function ranges mirrored onto the GPU) and each one's stretch of
    the timeline (`timeline_us`): its duration when nothing overlaps; under PDL the time it adds after the
    kernel before it ended, so that the stretches add up to the time the GPU was busy."""
    names, starts, ends = device_events(run, times)
    return names, timeline_us(starts, ends)


def timeline_us(starts: list[float], ends: list[float]) -> list[float]:
    """Each event's stretch of the timeline (events in stream order): from the latest end before it, or its
    start if later, to its end. They add up to the union of the intervals: overlap counts once."""
    out, reach = [], float("-inf")
    for s, e in zip(starts, ends):
        out.append(max(0.0, e - max(s, reach)))
        reach = max(reach, e)
    return out


def busy_us(starts: list[float], ends: list[float]) -> float:
    """The length of the union of the intervals [start, end]: the time something ran."""
    total, lo, hi = 0.0, None, None
    for s, e in sorted(zip(starts, ends)):
        if hi is None or s > hi:
            total += 0.0 if hi is None else hi - lo
            lo, hi = s, e
        else:
            hi = max(hi, e)
    return total + (0.0 if hi is None else hi - lo)


def device_events(run, times: int) -> tuple[list[str], list[float], list[float]]:
    """`_device_trace`'s events as names, start and end times (us), in stream order."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(times):
            run()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA
                     and not getattr(e, "is_user_annotation", False)), key=lambda e: e.time_range.start)
    return ([e.name for e in events], [float(e.time_range.start) for e in events],
            [float(e.time_range.end) for e in events])


@dataclass
class DecodeProfile:
    """`decode_breakdown`'s result: the same decode steps launched op by op and replayed from the graph."""
    context: float                              # mean cache length the profiled steps attend to
    gbps: float                                 # the measured copy ceiling
    bytes: dict[str, int]                       # slot -> bytes per token at `context`
    calls: Counter                              # slot -> calls per token (engine.tracing())
    runs: dict[str, Breakdown]

    @property
    def floor_us(self) -> float:
        return sum(self.bytes.values()) / (self.gbps * 1e9) * 1e6

    def __str__(self) -> str:
        head = (f"decode at ~{self.context:.0f} cached tokens: {sum(self.bytes.values()) / 1e6:.1f} MB per token, "
                f"bandwidth floor {self.floor_us:.1f} us at {self.gbps:.0f} GB/s; "
                f"{sum(self.calls.values())} op calls per token")
        return "\n\n".join([head, *map(str, self.runs.values())])

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731

    def plot(self):
        """Left: GPU time per token of each slot (graph replay) beside its bandwidth floor. Right: wall time
        against kernel time per token, op by op and from the graph, with the floor."""
        import matplotlib.pyplot as plt
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
        run = self.runs.get("CUDA graph") or next(iter(self.runs.values()))
        rows = run.slots
        ys = range(len(rows))
        ax.barh(ys, [r["us"] for r in rows], color="tab:orange", label=f"GPU time ({run.mode})")
        floors = [(r["bytes"] or 0) / (self.gbps * 1e9) * 1e6 for r in rows]
        ax.barh(ys, floors, color="none", edgecolor="k", hatch="//", label="its bytes at the copy ceiling")
        ax.set_yticks(list(ys), [f"{r['slot']} ({r['calls']:.0f}x)" for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("us per token")
        ax.set_title("where the GPU time goes, per slot")
        ax.legend(fontsize=8)
        modes = list(self.runs)
        bx.bar(modes, [self.runs[m].wall_us for m in modes], color="0.8", label="wall time per token")
        bx.bar(modes, [self.runs[m].kernel_us for m in modes], color="tab:orange", label="kernel time per token")
        bx.axhline(self.floor_us, color="k", ls="--", lw=1, label=f"bandwidth floor {self.floor_us:.0f} us")
        for i, m in enumerate(modes):
            bx.text(i, self.runs[m].wall_us, f"{self.runs[m].wall_us:.0f} us\n{self.runs[m].launches:.0f} kernels",
                    ha="center", va="bottom", fontsize=8)
        bx.set_ylabel("us per token")
        bx.set_title("the launch gap: GPU idle = wall - kernels")
        bx.legend(fontsize=8)
        fig.tight_layout()
        return fig


def _check_profile(engine, name: str, cpu_hint: str, modes, count_name: str, count: int) -> None:
    if engine.device.type != "cuda":
        raise RuntimeError(f"{name} profiles kernels on a GPU: this engine is on {engine.device.type}; "
                           f"on the CPU use {cpu_hint}")
    unknown = set(modes) - {"eager", "graph"}
    if unknown or not modes:
        raise ValueError(f"modes must be among ('eager', 'graph'), got {modes}")
    if count < 1:
        raise ValueError(f"{count_name} must be >= 1, got {count}")


def decode_breakdown(engine, steps: int = 8, prompt_len: int = 64,
                     modes: tuple[str, ...] = ("eager", "graph")) -> DecodeProfile:
    """Profile `steps` greedy decode steps of `engine` on the GPU after a `prompt_len`-token prompt, in each
    mode ("eager": launched op by op; "graph": replayed from the CUDA graph). Resets the engine.

    Wall time per token is measured in a separate run without the profiler (the profiler slows the host);
    kernel times come from torch.profiler's CUDA trace, which records the kernels of graph replays too.
    Bytes per slot follow the engine's level (`slot_bytes` with its step table).
    """
    _check_profile(engine, "decode_breakdown", "traced_calls and step_bytes", modes, "steps", steps)
    from .benchmark import ceiling_gbps
    gbps = ceiling_gbps()
    calls = traced_calls(engine, prompt_len)
    per_slot = slot_kernels(engine)
    context = prompt_len + 2 + (steps + 1) / 2 + steps     # the profiled run follows the timed one
    nbytes = slot_bytes(engine.config, round(context), engine.dtype, LEVELS[engine.level].steps)
    use_graph = engine.use_graph
    runs = {}
    try:
        for mode in modes:
            b = _profile_mode(engine, mode == "graph", steps, prompt_len, calls, per_slot, nbytes, gbps)
            runs[b.mode] = b
    finally:
        engine.use_graph = use_graph
        engine.reset()
    return DecodeProfile(context, gbps, nbytes, Counter(calls), runs)


def prefill_breakdown(engine, prompt_len: int = 128, runs: int = 3,
                      modes: tuple[str, ...] = ("eager", "graph")) -> dict[str, Breakdown]:
    """Profile `runs` prompts of `prompt_len` tokens on the GPU (each: the cache reset, the prompt, the
    first token read by the host), launched op by op ("eager") and replayed from the prompt chunks' CUDA
    graphs ("graph"); {mode name: Breakdown per prompt}. Resets the engine.

    The cache reset's memsets are part of every prompt and show as `OTHER`. No bytes per slot: a prompt's
    traffic depends on its length and tiles (the weights once, plus activations).
    """
    _check_profile(engine, "prefill_breakdown", "traced_prefill_calls", modes, "runs", runs)
    calls = traced_prefill_calls(engine, prompt_len)
    per_slot = slot_kernels(engine, "prefill")
    ids = _prompt(engine, prompt_len)

    def one_prompt():
        engine.reset()
        engine.prefill(ids)
        int(engine.counters.ids[0])

    use_graph, out = engine.use_graph, {}
    try:
        for mode in modes:
            engine.use_graph = mode == "graph"      # a chunk is captured at its second use: in the warm-up
            b = _breakdown(one_prompt, runs, engine.use_graph, calls, per_slot, {}, 1.0, per="prompt")
            out[b.mode] = b
    finally:
        engine.use_graph = use_graph
        engine.reset()
    return out


# --- the GPU script: scripts/gpu_extras.sh profile -----------------------------------------------------------
def _runs_json(runs: dict[str, Breakdown]) -> dict:
    return {m: {"wall_us": b.wall_us, "kernel_us": b.kernel_us, "launches": b.launches, "kernels": b.kernels,
                "slots": b.slots} for m, b in runs.items()}


def _prefill_report(engine, level: str, result: dict) -> list[str]:
    """Profile a 128-token prompt at this level into result["prefill_profiles"]; the markdown lines. A
    failure is reported, not raised: the decode profiles are still written."""
    title = f"## {level}, prefill of a 128-token prompt"
    try:
        pre = prefill_breakdown(engine, prompt_len=128)
    except Exception as e:
        print(f"{level} prefill profile failed: {type(e).__name__}: {e}")
        return [f"{title}: failed ({type(e).__name__}: {e})\n"]
    result.setdefault("prefill_profiles", []).append({"level": level, "prompt_len": 128, "runs": _runs_json(pre)})
    print(f"{level} prefill 128: " + "; ".join(
        f"{m} {b.wall_us:.0f} us wall, {b.kernel_us:.0f} us kernels" for m, b in pre.items()))
    return [f"{title}\n", "```", "\n\n".join(str(b) for b in pre.values()), "",
            pre["CUDA graph"].kernel_table(25), "```\n"]


def main(argv=None) -> int:
    """Profile the engine's decode step on the GPU, op by op and from the CUDA graph: every optimisation
    level at 128 cached tokens, the fast one at 4,096 too; and each level's prefill of a 128-token prompt;
    writes profile_<gpu>_<date>.{json,md,png} (`--config qwen3.5-27b`: another size of the family, random
    weights of its shapes, profile_<config>_<gpu>_<date>.*)."""
    import json

    from .benchmark import gpu_script, results_stem
    from ..config import FAMILY, get_config
    from ..engine import Engine

    def add_args(ap):
        ap.add_argument("--config", choices=FAMILY, default="qwen3.5-0.8b", help="the size of the family profiled")
    started = gpu_script(main.__doc__, argv, add_args)
    if started is None:
        return 1
    args, _ = started
    config = get_config(args.config)
    stem, date = results_stem(args.out, "profile" if args.config == "qwen3.5-0.8b" else f"profile_{args.config}")
    result = {"gpu": torch.cuda.get_device_name(), "date": date, "dtype": "bfloat16",
              "versions": f"torch {torch.__version__}, triton {__import__('triton').__version__}", "profiles": []}
    result["config"] = args.config
    text = [f"# Decode step per kernel, {args.config} on {result['gpu']}, {date} (bf16, random weights)\n"]
    figure = None
    for level, context in (("operators", 128), ("fused", 128), ("fast", 128), ("fast", 4096)):
        engine = Engine.random(config, torch.bfloat16, "cuda", seed=0, max_seq_len=context + 64,
                               level=level)
        prof = decode_breakdown(engine, steps=8, prompt_len=context)
        result["profiles"].append({
            "level": level, "context": context, "floor_us": prof.floor_us, "gbps": prof.gbps,
            "calls": dict(prof.calls),
            "runs": _runs_json(prof.runs)})
        text += [f"## {level}, {context} cached tokens\n", "```", str(prof), "",
                 prof.runs["CUDA graph"].kernel_table(25), "```\n"]
        if figure is None:
            figure = prof.plot()
        print(f"{level} @ {context}: " + "; ".join(
            f"{m} {b.wall_us:.0f} us wall, {b.kernel_us:.0f} us kernels" for m, b in prof.runs.items()))
        if context == 128:                      # the bench's prompt, at the same level
            text += _prefill_report(engine, level, result)
        del engine
        torch.cuda.empty_cache()
    atomic_write_text(stem.with_suffix(".json"), json.dumps(result, indent=1, default=float))
    atomic_write_text(stem.with_suffix(".md"), "\n".join(text))
    if figure is not None:
        save_figure(figure, stem.with_suffix(".png"), dpi=120)
    print(f"written to {stem}.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
