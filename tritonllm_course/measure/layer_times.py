"""Per layer: the engine's prefill and decode timed layer by layer and per kind of layer, Gated DeltaNet
against gated attention (chapter 20_profile): `layer_times(engine)`, and on a GPU every level in one run,
`tritonllm-course layers --out results` (writes layers_<gpu>_<date>.{json,md,png}).

Method. The decode step replays from one CUDA graph (a prompt chunk too, once its length has been met), so
CUDA events at the layer boundaries would mean cutting the graph into pieces: another step than the one
measured. The layers are found in a device trace instead, as `profiling.py` finds the slots: torch.profiler
records every kernel of the replays (its name, start and end on the GPU); `trace.layer_tracing` records
the calls of one step op by op, each with its part of the step (the embedding, layer i, the head);
`trace.place_kernels` puts the k-th launch of a kernel name on the k-th call that can launch it, and the
part of that call is the kernel's. `trace.check_attribution` and `check_layers` refuse a trace or a
labelling that does not fit the calls (a call list shifted by one, say): a wrong attribution is an error,
never a table.

The time of a part is the stretch of the GPU's timeline its kernels cover: each kernel from the end of the
one before it (or its own start, if later) to its end. Without overlap that is the kernels' durations; with
programmatic dependent launch (on sm_90+ the decode step, and a prompt chunk of up to
`Engine.PDL_PROMPT_TOKENS` tokens) a kernel starts while the one before it drains,
and the overlap counts once, for the kernel that ran first. So the parts add up to the time the GPU was
busy (checked against the union of the kernels' intervals); the wall time per step, measured without the
profiler, is beside it. Outside the layers: the embedding; the head (the final norm, with the last layer's
residual add where the level fuses them, the LM head, argmax, the position counters); "other", device work
of no course kernel between two parts (the prompt's copy to the GPU, the token's copy to the host; a new
sequence launches nothing); such work between two kernels of one part counts for that part (the counters
set between the LM head and the argmax of a prompt, for the head).

Runs: prefill = a prompt into an empty cache, its first token read by the host, `prompts` times; decode at L
= after a prompt of L tokens, `steps` steps, each reading the token of the one before as the engine streams.
On a GPU two of each run untimed first (compile, autotune, capture), then as many as are traced run on the
wall clock without the profiler, then the traced ones. On the CPU only the traced ones run, and the same
attribution places the interpreter's launches, timed on the host: the interpreter's times, which say
nothing about a GPU. The command starts no new level after `--budget-s` seconds and rewrites its files after
each level, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import torch

from ..engine import Engine
from ..engine.plan import LEVELS
from ..safe_files import UnsafeWrite, atomic_write_text, check_out_folder, save_figure
from .trace import (EMBEDDING, HEAD, OTHER, AttributionError, busy_us, check_attribution, check_layers,
                    check_prompt_len, decode_and_read, device_events, layer_tracing, place_kernels, probe_prompt,
                    slot_kernels, timeline_us, traced_calls, traced_prefill_calls)

OTHER_PART = "other"
KINDS = ("DeltaNet", "attention", EMBEDDING, HEAD, OTHER_PART)
KIND_LABELS = {"DeltaNet": "Gated DeltaNet layer", "attention": "gated attention layer", EMBEDDING: "embedding",
               HEAD: "head (final norm, LM head, argmax)", OTHER_PART: "other (not a course kernel)"}
COLOURS = {"DeltaNet": "tab:purple", "attention": "tab:orange", EMBEDDING: "0.55", HEAD: "0.3",
           OTHER_PART: "0.8"}
WARMUP = 2          # untimed runs on a GPU: compile, autotune, capture the graphs


def layer_kinds(config) -> list[str]:
    """The kind of each layer index: "attention" (full attention) or "DeltaNet" (linear attention)."""
    return ["attention" if t == "full_attention" else "DeltaNet" for t in config.layer_types]


# --- the traces ----------------------------------------------------------------------------------------------
def interpreter_events(run, times: int) -> tuple[list[str], list[float], list[float]]:
    """On the CPU: every Triton kernel the interpreter launches during `times` calls of `run`, as names,
    start and end times (us, host clock), in launch order; each launch runs to its end before the next."""
    from triton.runtime.interpreter import InterpretedFunction
    launch = InterpretedFunction.run
    names, starts, ends = [], [], []

    def timed(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return launch(self, *args, **kwargs)
        t0 = time.perf_counter()
        try:
            return launch(self, *args, **kwargs)
        finally:
            names.append(self.fn.__name__)
            starts.append(t0 * 1e6)
            ends.append(time.perf_counter() * 1e6)

    InterpretedFunction.run = timed
    try:
        for _ in range(times):
            run()
    finally:
        InterpretedFunction.run = launch
    return names, starts, ends


def _events_of(engine):
    if engine.device.type == "cuda":
        return device_events
    if engine.device.type == "cpu":
        return interpreter_events
    raise ValueError(f"layer_times runs an engine on a GPU or on the CPU (the interpreter), not on "
                     f"{engine.device.type}")


def part_times(kernel_names: list[str], starts: list[float], ends: list[float], placed: list, calls: list,
               kinds: list[str], repeats: int) -> list[dict]:
    """Per part of a step (the embedding, each layer, the head, other), per run: "us" (its stretches of
    the timeline), "launches", "slots" ({slot: us}; unplaced work under `OTHER`) and its "kind".

    placed: `place_kernels`' (run, call) per event; calls: the step's `Call`s. An unplaced event (no course
    kernel) between two placed ones of the same run and part belongs to that part, else to "other"."""
    own = [None if p is None else (p[0], calls[p[1]].part) for p in placed]
    before, after, seen = [None] * len(own), [None] * len(own), None
    for k, o in enumerate(own):
        before[k], seen = seen, o or seen
    seen = None
    for k in reversed(range(len(own))):
        after[k], seen = seen, own[k] or seen
    order = [EMBEDDING, *range(len(kinds)), HEAD, OTHER_PART]
    rows = {p: {"part": p, "kind": kinds[p] if isinstance(p, int) else p, "us": 0.0, "launches": 0, "slots": {}}
            for p in order}
    for k, span in enumerate(timeline_us(starts, ends)):
        if own[k] is not None:
            part, slot = own[k][1], calls[placed[k][1]].slot
        else:
            part = before[k][1] if before[k] is not None and before[k] == after[k] else OTHER_PART
            slot = OTHER
        row = rows[part]
        row["us"] += span / repeats
        row["launches"] += 1 / repeats
        row["slots"][slot] = row["slots"].get(slot, 0.0) + span / repeats
    return [rows[p] for p in order]


# --- one path --------------------------------------------------------------------------------------------------
@dataclass
class PhaseTimes:
    """One path's time per part of the step: per prompt (prefill) or per token (decode)."""
    name: str                          # "prefill 128", "decode @ 4096"
    path: str                          # "prefill" or "decode"
    tokens: int                        # the prompt's length, or the cached tokens before the steps
    runs: int                          # prompts or decode steps traced
    parts: list[dict]                  # `part_times`
    kernel_us: float                   # the kernels' durations summed, per run (with overlap, above busy_us)
    wall_us: float | None = None       # per run, without the profiler (GPU only)
    cached: float | None = None        # decode: mean tokens the traced steps attend to

    @property
    def per(self) -> str:
        return "prompt" if self.path == "prefill" else "token"

    @property
    def busy_us(self) -> float:
        """The GPU's busy time per run: every part's time together."""
        return sum(p["us"] for p in self.parts)

    def kinds(self) -> list[dict]:
        """Per kind (DeltaNet and attention layers, embedding, head, other): parts, us (all of them),
        mean_us (per part: per layer for the layer kinds) and share of the busy time."""
        out = []
        for kind in KINDS:
            rows = [p for p in self.parts if p["kind"] == kind]
            us = sum(p["us"] for p in rows)
            if rows:
                out.append({"kind": kind, "parts": len(rows), "us": us, "mean_us": us / len(rows),
                            "share": us / self.busy_us if self.busy_us else 0.0})
        return out

    def as_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "tokens": self.tokens, "runs": self.runs,
                "per": self.per, "cached": self.cached, "wall_us": self.wall_us, "busy_us": self.busy_us,
                "kernel_us": self.kernel_us, "kinds": self.kinds(), "parts": self.parts}


def _room(engine, prompt_len: int, tokens: int) -> None:
    if prompt_len < 1:
        raise ValueError(f"a decode measurement needs a prompt of at least 1 token, got {prompt_len}")
    if prompt_len + tokens > engine.max_seq_len:
        raise ValueError(f"a {prompt_len}-token prompt and {tokens} decode steps need a cache of "
                         f"{prompt_len + tokens} tokens; the engine holds {engine.max_seq_len} (max_seq_len)")


def _counts(engine, runs: int, what: str) -> tuple[int, int]:
    """(untimed runs, timed runs) before the traced ones: none on the CPU (no compiling, no wall time)."""
    if runs < 1:
        raise ValueError(f"{what} must be >= 1, got {runs}")
    return (WARMUP, runs) if engine.device.type == "cuda" else (0, 0)


def _phase(engine, name: str, path: str, tokens: int, run, runs: int, warmup: int, timed: int,
           calls: list | None, cached: float | None = None) -> PhaseTimes:
    """Run `run` warmup + timed + runs times, the last `runs` traced; each kernel placed on its call
    (`calls`: one run's, or None: traced from the runs themselves, which then run op by op), checked,
    summed per part."""
    events = _events_of(engine)
    for _ in range(warmup):
        run()
    wall = None
    if timed:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(timed):
            run()
        torch.cuda.synchronize()           # the decode loop leaves its last step in flight (one step ahead)
        wall = (time.perf_counter() - t0) * 1e6 / timed
    if calls is None:
        with layer_tracing(engine) as every:
            names, starts, ends = events(run, runs)
        calls = every[:len(every) // runs]
        if every != calls * runs:
            raise AttributionError(f"the {runs} traced runs of {name} did not call the same slots")
    else:
        names, starts, ends = events(run, runs)
    if not names:
        raise RuntimeError(f"{name}: the trace holds no device work (no Triton kernel ran: every slot on the "
                           "PyTorch reference, or a CPU without the interpreter)")
    slots, per_slot, kinds = [c.slot for c in calls], slot_kernels(engine, path), layer_kinds(engine.config)
    placed = place_kernels(names, slots, per_slot, runs)
    check_attribution(names, placed, slots, per_slot, runs)
    check_layers(calls, engine.plan.steps, kinds)
    parts = part_times(names, starts, ends, placed, calls, kinds, runs)
    result = PhaseTimes(name, path, tokens, runs, parts, sum(e - s for s, e in zip(starts, ends)) / runs, wall,
                        cached)
    busy = busy_us(starts, ends) / runs
    if abs(result.busy_us - busy) > 1e-6 * busy + 1e-6:
        raise RuntimeError(f"{name}: the parts add up to {result.busy_us:.3f} us, the trace was busy {busy:.3f} us")
    return result


def prefill_phase(engine, prompt_len: int = 128, prompts: int = 3) -> PhaseTimes:
    """Per part of a `prompt_len`-token prompt (a new sequence, the prompt, its first token read), as the
    engine runs it (replayed from the prompt chunk's CUDA graph where it has them). Resets the engine."""
    check_prompt_len(engine, prompt_len)
    warmup, timed = _counts(engine, prompts, "prompts")
    ids = probe_prompt(engine, prompt_len)

    def one_prompt():
        engine.reset()
        engine.prefill(ids)
        int(engine.counters.ids[0])

    graphed = engine.use_graph and engine.prefill_graph
    calls = traced_prefill_calls(engine, prompt_len, layers=True) if graphed else None
    try:
        return _phase(engine, f"prefill {prompt_len}", "prefill", prompt_len, one_prompt, prompts, warmup, timed,
                      calls)
    finally:
        engine.reset()


def decode_phase(engine, context: int = 128, steps: int = 8) -> PhaseTimes:
    """Per part of a greedy decode token after a prompt of `context` tokens, as the engine runs it (replayed
    from the CUDA graph where it has one), `steps` steps traced. Resets the engine."""
    warmup, timed = _counts(engine, steps, "steps")
    _room(engine, context, warmup + timed + steps)
    calls = None
    if engine.use_graph:    # a replay runs no Python: one step traced op by op first, its prompt too (no new
        keep, engine.prefill_graph = engine.prefill_graph, False     # prompt graphs captured for it)
        try:
            calls = traced_calls(engine, context, layers=True)
        finally:
            engine.prefill_graph = keep
    engine.reset()
    engine.prefill(probe_prompt(engine, context))
    cached = context + warmup + timed + (steps + 1) / 2
    try:
        return _phase(engine, f"decode @ {context}", "decode", context, decode_and_read(engine), steps, warmup,
                      timed, calls, cached)
    finally:
        engine.reset()


# --- one engine ------------------------------------------------------------------------------------------------
@dataclass
class LayerTimes:
    """`layer_times`' result: one engine's paths, each per part of the step. `table()`: per kind (markdown);
    `layer_table()`: per layer; `plot()`: per-layer bars coloured by kind."""
    level: str
    device: str
    dtype: str
    kinds: list[str]                   # the kind of each layer index
    graph: bool                        # decode (and repeated prompts) replayed from CUDA graphs
    pdl: bool                          # programmatic dependent launch: the decode step, chunks <= 128 tokens
    phases: dict[str, PhaseTimes] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)     # phase -> why it has no result

    def table(self) -> str:
        """Per kind of part and path: mean us per layer (per part outside the layers) and the share of the
        step's busy time (all the layers of the kind together); then the busy time, the kernels' durations
        summed and the wall time, per prompt or per token."""
        phases = list(self.phases.values())
        head = "| part | " + " | ".join(f"{p.name}: us | share of step" for p in phases) + " |"
        lines = [head, "|---" * (1 + 2 * len(phases)) + "|"]
        for kind in KINDS:
            cells = []
            for p in phases:
                row = next((r for r in p.kinds() if r["kind"] == kind), None)
                cells += [f"{row['mean_us']:.1f}", f"{100 * row['share']:.1f}%"] if row else ["-", "-"]
            n = self.kinds.count(kind)
            label = f"{KIND_LABELS[kind]} (x{n}): mean, share of all {n}" if kind in ("DeltaNet", "attention") \
                else KIND_LABELS[kind]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        for label, value in (("busy per run (the parts together)", lambda p: p.busy_us),
                             ("kernels' durations summed", lambda p: p.kernel_us),
                             ("wall time per run", lambda p: p.wall_us)):
            cells = [f"{value(p):.1f} |" if value(p) is not None else "- |" for p in phases]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def layer_table(self) -> str:
        """Us per part of every path, one row per part (markdown)."""
        phases = list(self.phases.values())
        lines = ["| part | kind | " + " | ".join(f"{p.name} (us per {p.per})" for p in phases) + " |",
                 "|---" * (2 + len(phases)) + "|"]
        for k, row in enumerate(phases[0].parts if phases else []):
            cells = [f"{p.parts[k]['us']:.1f}" for p in phases]
            lines.append(f"| {row['part']} | {row['kind']} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    @property
    def heading(self) -> str:
        how = ("CUDA graph" if self.graph else "op by op") + (", PDL" if self.pdl else "")
        times = ": the interpreter's times, not a GPU's" if "interpreter" in self.device else ""
        return f"{self.level} level, {self.device}, {self.dtype} ({how}){times}"

    def __str__(self) -> str:
        failed = "".join(f"\n{name}: failed ({why})" for name, why in self.errors.items())
        return f"{self.heading}\n{self.table()}{failed}"

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731

    def plot(self, axes=None):
        """One panel per path: us per part (embedding, layer 0.., head, other), coloured by kind; the decode
        panels on one scale. `axes`: a row of them to draw into (one per path), else a new figure."""
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
        phases = list(self.phases.values())
        if axes is None:
            fig, grid = plt.subplots(1, max(1, len(phases)), figsize=(4.8 * max(1, len(phases)), 3.4),
                                     squeeze=False)
            axes = grid[0]
        fig = axes[0].figure
        for ax, p in zip(axes, phases):
            xs = range(len(p.parts))
            ax.bar(xs, [r["us"] for r in p.parts], color=[COLOURS[r["kind"]] for r in p.parts])
            ax.set_xticks(list(xs), ["emb" if r["part"] == EMBEDDING else str(r["part"]) for r in p.parts],
                          rotation=90, fontsize=6)
            ax.set_ylabel(f"us per {p.per}", fontsize=8)
            ax.set_title(f"{self.level}: {p.name}, {p.busy_us:.0f} us busy", fontsize=9)
        decode = [ax for ax, p in zip(axes, phases) if p.path == "decode"]
        top = max((ax.get_ylim()[1] for ax in decode), default=None)
        for ax in decode:                  # one scale for every context: the growth reads off the bars
            ax.set_ylim(0, top)
        axes[0].legend(handles=[Patch(color=COLOURS[k], label=KIND_LABELS[k]) for k in KINDS], fontsize=6)
        fig.tight_layout()
        return fig

    def as_dict(self) -> dict:
        return {"level": self.level, "device": self.device, "dtype": self.dtype, "layer_kinds": self.kinds,
                "graph": self.graph, "pdl": self.pdl, "phases": {n: p.as_dict() for n, p in self.phases.items()},
                "errors": self.errors}


def _describe(engine) -> dict:
    gpu = engine.device.type == "cuda"
    return dict(level=engine.level, device=torch.cuda.get_device_name(engine.device) if gpu
                else "CPU (Triton interpreter)", dtype=str(engine.dtype).replace("torch.", ""),
                kinds=layer_kinds(engine.config), graph=engine.use_graph, pdl=bool(engine.pdl and gpu))


def check_runs(engine, prompt_len: int, contexts, steps: int, prompts: int) -> None:
    """Every argument of `layer_times` checked against the engine before any work."""
    check_prompt_len(engine, prompt_len)
    if not contexts:
        raise ValueError("give at least one decode context")
    warmup, timed = _counts(engine, steps, "steps")
    _counts(engine, prompts, "prompts")
    for context in contexts:
        _room(engine, context, warmup + timed + steps)
    _events_of(engine)


def layer_times(engine, prompt_len: int = 128, contexts=(128, 4096), steps: int = 8,
                prompts: int = 3) -> LayerTimes:
    """Time `engine` per layer and per kind of layer, as it runs (its level, its CUDA graphs, PDL): a
    `prompt_len`-token prompt (`prompts` times) and a decode token after a prompt of each of `contexts`
    (`steps` steps each); see the module's docstring for the method. Resets the engine.

    On a GPU the times are the device's; on the CPU the interpreter's (the structure is the same)."""
    check_runs(engine, prompt_len, contexts, steps, prompts)
    out = LayerTimes(**_describe(engine))
    p = prefill_phase(engine, prompt_len, prompts)
    out.phases[p.name] = p
    for context in contexts:
        d = decode_phase(engine, context, steps)
        out.phases[d.name] = d
    return out


# --- the GPU run: `tritonllm-course layers` --------------------------------------------------------------------
def _markdown(results: list[LayerTimes], meta: dict) -> str:
    text = [f"# Per layer: {meta['model']} on {meta['gpu']}, {meta['date']} ({meta['dtype']}, random weights)\n",
            f"{meta['versions']}. Each level as the engine runs it: the decode step and the repeated prompt "
            "replayed from CUDA graphs, PDL where the GPU has it (at decode and for prompt chunks of up to "
            f"{Engine.PDL_PROMPT_TOKENS} tokens). Per part of a step: its kernels' "
            "stretch of the GPU's timeline (overlap counted once), every kernel placed on its layer by the "
            "order of the traced calls (tritonllm_course/measure/layer_times.py). The parts add up to the "
            "GPU's busy time (checked); outside the layers: the embedding, the head (final norm, LM head, "
            "argmax, the position counters) and other (device work of no course kernel between parts: the "
            "copies of the prompt and the token). Prefill: per prompt; "
            "decode: per token.\n"]
    for r in results:
        how = ("CUDA graph" if r.graph else "op by op") + (", PDL" if r.pdl else "")
        text += [f"## {r.level} ({how})\n", r.table(), ""]
        text += [f"{name}: failed ({why})\n" for name, why in r.errors.items()]
        if r.phases:
            text += ["Per layer:\n", r.layer_table(), ""]
    return "\n".join(text)


def write_results(results: list[LayerTimes], stem, meta: dict) -> None:
    """stem.json (everything), stem.md (the tables), stem.png (per-layer bars: a row per level)."""
    import json

    import matplotlib.pyplot as plt
    atomic_write_text(stem.with_suffix(".json"),
                      json.dumps({**meta, "levels": [r.as_dict() for r in results]}, indent=1))
    atomic_write_text(stem.with_suffix(".md"), _markdown(results, meta))
    shown = [r for r in results if r.phases]
    if shown:
        cols = max(len(r.phases) for r in shown)
        fig, grid = plt.subplots(len(shown), cols, figsize=(4.8 * cols, 3.2 * len(shown)), squeeze=False)
        for row, r in zip(grid, shown):
            r.plot(row)
        save_figure(fig, stem.with_suffix(".png"), dpi=110)
        plt.close(fig)


def add_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--out", default="results", help="folder of layers_<gpu>_<date>.{json,md,png} (GPU only)")
    p.add_argument("--levels", nargs="+", choices=tuple(LEVELS), default=list(LEVELS))
    p.add_argument("--config", default=None,
                   help="qwen3.5-0.8b (default on a GPU) or tiny (the only one on the CPU: there the interpreter "
                        "runs it and the tables are printed, nothing written)")
    p.add_argument("--prompt-len", type=int, default=128, help="the prefill's prompt (default 128)")
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 4096],
                   help="cached tokens of the decode measurements (default 128 4096)")
    p.add_argument("--steps", type=int, default=8, help="decode steps traced per context (default 8)")
    p.add_argument("--prompts", type=int, default=3, help="prompts traced (default 3)")
    p.add_argument("--budget-s", type=float, default=150.0,
                   help="start no new level after this many seconds (default 150)")
    return p


def add_layers_parser(subparsers) -> argparse.ArgumentParser:
    """The `layers` subcommand of `tritonllm-course`."""
    p = subparsers.add_parser("layers", help="the engine per layer and per kind of layer, prefill and decode, "
                              "at each level (GPU; --config tiny on the CPU)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(p).set_defaults(func=run_layers)
    return p


def run_layers(args) -> int:
    """Run `tritonllm-course layers`; returns the exit status (2: bad arguments; 1: no GPU, or a failure)."""
    from ..config import get_config
    from ..runtime import setup
    from .benchmark import results_stem

    rt = setup(quiet=True)
    name = ("qwen3.5-0.8b" if rt.on_gpu else "tiny") if args.config is None else args.config   # "" is no name
    bad = [f"--{k.replace('_', '-')} must be >= 1" for k in ("prompt_len", "steps", "prompts")
           if getattr(args, k) < 1] + (["--contexts must be >= 1"] if min(args.contexts) < 1 else []) \
        + (["--budget-s must be above 0"] if not args.budget_s > 0 else [])                       # NaN: refused
    try:
        config = get_config(name)
    except (ValueError, OSError) as e:   # OSError: a folder without config.json, one that cannot be read
        bad.append(str(e))
    if rt.on_gpu:                                  # the CPU writes nothing; a GPU run says so before its minutes
        try:
            check_out_folder(args.out)
        except UnsafeWrite as e:
            bad.append(str(e))
    if bad:
        print("tritonllm-course layers: error: " + "; ".join(bad), file=sys.stderr)
        return 2
    if not rt.on_gpu and name != "tiny":
        print(f"tritonllm-course layers: {name} needs a GPU: nothing measured (on the CPU, --config tiny runs the "
              "interpreter and prints the tables)", file=sys.stderr)
        return 1
    dtype, device = (rt.dtype, "cuda") if rt.on_gpu else (torch.float32, "cpu")
    room = (WARMUP + args.steps if rt.on_gpu else 0) + args.steps
    max_seq_len = max(args.prompt_len, max(args.contexts) + room)
    if max_seq_len > config.max_position_embeddings:
        if not rt.on_gpu:   # the GPU's sizes on the CPU: as `bench`, say what it needs
            print("tritonllm-course layers: skipped: it measures the engine on a CUDA GPU; on this CPU the "
                  "interpreter runs --config tiny at small sizes only (e.g. --prompt-len 4 --contexts 4 --steps 1 "
                  "--prompts 1)", file=sys.stderr)
            return 1
        print(f"tritonllm-course layers: error: --prompt-len, --contexts and --steps need {max_seq_len} positions, "
              f"more than {name}'s {config.max_position_embeddings}", file=sys.stderr)
        return 2
    started, results = time.perf_counter(), []
    meta = {"model": "Qwen3.5-0.8B" if name == "qwen3.5-0.8b" else name, "dtype": str(dtype).replace("torch.", ""),
            "versions": f"torch {torch.__version__}, triton {__import__('triton').__version__}",
            "prompt_len": args.prompt_len, "contexts": args.contexts, "steps": args.steps, "prompts": args.prompts}
    stem = None
    if rt.on_gpu:
        stem, meta["date"] = results_stem(args.out, "layers")
        meta["gpu"] = torch.cuda.get_device_name()
    for level in args.levels:
        if time.perf_counter() - started > args.budget_s:
            print(f"{level}: not started, over the budget of {args.budget_s:.0f} s")
            continue
        engine = Engine.random(config, dtype, device, seed=0, max_seq_len=max_seq_len, level=level)
        out = LayerTimes(**_describe(engine))
        steps = [("prefill", lambda: prefill_phase(engine, args.prompt_len, args.prompts))]
        steps += [(f"decode @ {c}", lambda c=c: decode_phase(engine, c, args.steps)) for c in args.contexts]
        for what, measure in steps:
            try:
                phase = measure()
                out.phases[phase.name] = phase
            except Exception as e:      # reported, and the other measurements still written
                out.errors[what] = f"{type(e).__name__}: {e}"
        results.append(out)
        print(f"{out}\n({time.perf_counter() - started:.0f} s so far)\n", flush=True)
        del engine
        if rt.on_gpu:
            torch.cuda.empty_cache()
            write_results(results, stem, meta)          # after every level: a run cut short keeps what it did
    if stem is not None:
        print(f"written to {stem}.{{json,md,png}}")
    else:
        print("the interpreter's times on the CPU: they say nothing about a GPU; nothing written")
    return 1 if any(r.errors for r in results) or len(results) < len(args.levels) else 0


def main(argv=None) -> int:
    """`python -m tritonllm_course.measure.layer_times`: the same as `tritonllm-course layers`."""
    ap = add_args(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    return run_layers(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
