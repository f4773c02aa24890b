"""Reading a decode step from both sides (chapter 20_profile): the kernel slots the engine calls, traced on the host
(`traced_calls`, `traced_prefill_calls`; `layer_tracing` with each call's layer), the kernels the GPU ran,
read from torch.profiler's device trace (`device_events`, `timeline_us`), and each kernel attributed to the
call that launched it (`slot_kernels`, `place_kernels`, `attribute`; `check_attribution` and `check_layers`
refuse a trace, or a labelling, that does not fit the calls). Tracing runs on the CPU; a device trace needs
a GPU. `profiling.py` and `layer_times.py` build their tables on these.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import sys
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

import torch

from ..config import Qwen35Config
from ..engine.engine import TokenReader
from ..engine.plan import STEPS
from ..regions import call_closure

OTHER = "other (not a course kernel)"
EMBEDDING, HEAD = "embedding", "head"    # the parts of a step outside its layers


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


def ready_for_decode(engine, prompt_len: int, tokens: int) -> None:
    """Reset the engine and prefill a prompt of `prompt_len` tokens, with room for `tokens` more."""
    if prompt_len + tokens > engine.max_seq_len:
        raise ValueError(f"a {prompt_len}-token prompt and {tokens} decode steps need a cache of "
                         f"{prompt_len + tokens} tokens; the engine holds {engine.max_seq_len} (max_seq_len)")
    engine.reset()
    engine.prefill(probe_prompt(engine, prompt_len))


def traced_calls(engine, prompt_len: int = 4, layers: bool = False) -> list:
    """The slots one greedy decode step of `engine` calls, in order (`engine.tracing()`; no timing, runs on
    the CPU); with `layers`, each as a `Call` with its part of the step (`layer_tracing`). Resets the
    engine."""
    ready_for_decode(engine, prompt_len, 1)
    graph, engine.use_graph = engine.use_graph, False     # a graph replay runs no Python: nothing to trace
    try:
        with (layer_tracing(engine) if layers else engine.tracing()) as calls:
            engine.decode()
    finally:
        engine.use_graph = graph
    return list(calls)


def probe_prompt(engine, prompt_len: int) -> list[int]:
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
            engine.prefill(probe_prompt(engine, prompt_len))
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


_OWN_MODULES = ("tritonllm_course", "solutions", "exercises")   # whose functions `kernels_of` follows


@functools.lru_cache(maxsize=256)
def _module_body(text: str) -> tuple:
    """A module source's top-level statements, parsed once per source text (a reloaded module: a new text)."""
    return tuple(ast.parse(text).body)


@functools.lru_cache(maxsize=4096)
def _closure(text: str, function: str) -> frozenset:
    return frozenset(call_closure(text, function))


def kernels_of(fn, _seen: set | None = None) -> set[str]:
    """Names of the Triton kernels a host wrapper can launch: the @triton.jit functions its module-level
    call closure refers to (imported ones included), and those of the course's functions it calls through
    an imported module (`tma_gemm.launch(...)`: the prompt GEMMs' TMA form)."""
    from triton.runtime.jit import KernelInterface
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = sys.modules.get(getattr(fn, "__module__", ""))
    if module is None or not inspect.isfunction(fn):
        return set()
    seen = set() if _seen is None else _seen
    if (module.__name__, fn.__name__) in seen:
        return set()
    seen.add((module.__name__, fn.__name__))
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError):
        return set()
    closure = _closure(text, fn.__name__)
    names = set()
    for node in _module_body(text):
        if isinstance(node, ast.FunctionDef) and node.name in closure:
            for ref in ast.walk(node):
                if isinstance(ref, ast.Name):
                    obj = module.__dict__.get(ref.id)
                elif isinstance(ref, ast.Attribute) and isinstance(ref.value, ast.Name) \
                        and inspect.ismodule(owner := module.__dict__.get(ref.value.id)) \
                        and owner.__name__.startswith(_OWN_MODULES):
                    obj = getattr(owner, ref.attr, None)
                    if inspect.isfunction(obj):
                        names |= kernels_of(obj, seen)
                else:
                    obj = None
                if isinstance(obj, KernelInterface):
                    names.add(_kernel_name(obj))
    return names


def slot_kernels(engine, path: str = "decode") -> dict[str, set[str]]:
    """{slot of the decode (or "prefill") path: names of the Triton kernels its op can launch} (empty for
    PyTorch ops)."""
    if path not in ("decode", "prefill"):
        raise ValueError(f"path must be 'decode' or 'prefill', got {path!r}")
    path_slots = {getattr(s, path) for s in engine.plan.steps if getattr(s, path)}
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


def decode_and_read(engine) -> Callable[[], None]:
    """One decode step per call as the engine streams: each step queued, then the token of the step
    before it read by the host (`TokenReader`, one step behind)."""
    reader = TokenReader(engine.counters.ids)

    def step():
        engine.decode()
        reader.push()
        if len(reader.queue) == 2:
            reader.pop()
    return step


def device_trace(run, times: int) -> tuple[list[str], list[float]]:
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
    """`device_trace`'s events as names, start and end times (us), in stream order."""
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
