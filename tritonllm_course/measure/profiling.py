"""Profile first: where a decode step of the engine spends its time, and how far each kernel is from the
bytes it must move (chapter 20_profile). Built on the byte model (`bytes_model.py`: the bytes a token must move) and
on the traces (`trace.py`: the calls the engine makes, the kernels the GPU ran, each kernel's call).

- `decode_breakdown` (GPU only): torch.profiler over a few decode steps, launched op by op and replayed
  from the CUDA graph; every kernel of the trace attributed to the slot that launched it; GPU time per
  token, per kernel and per slot, against the wall time per token and against the bytes of each slot (of
  the plan the engine fitted, `engine.plan`). A kernel's time is its stretch of the timeline
  (`trace.timeline_us`): its duration, or under PDL, where a kernel starts before the one ahead of it ends,
  the time it adds after that end, so the times add up to the GPU's busy time.
- `prefill_breakdown` (GPU only): the same for a prompt, per prompt.
- `Breakdown` / `DecodeProfile`: the tables and the plot of one profile.
- `prompt_table`: a profile record's prompts of one level side by side, slot by slot (chapter 20_profile).
- `main`: the GPU script (scripts/gpu_extras.sh profile).
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from ..config import FAMILY, get_config
from ..engine import Engine
from ..safe_files import atomic_write_text, save_figure
from .benchmark import ceiling_gbps, gpu_script, results_stem
from .bytes_model import slot_bytes
from .trace import (attribute, decode_and_read, device_trace, probe_prompt, ready_for_decode, slot_kernels,
                    traced_calls, traced_prefill_calls)


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
    ready_for_decode(engine, prompt_len, 2 + 2 * tokens)
    return _breakdown(decode_and_read(engine), tokens, graph, calls, per_slot, nbytes, gbps)


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
    names, durations = device_trace(run, times)
    kernels, slots = _tables(names, durations, attribute(names, calls, per_slot, times), times, nbytes, gbps)
    return Breakdown("CUDA graph" if graph else "launched op by op", times, wall_us, kernels, slots, per=per)


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
    Bytes per slot follow the plan the engine fitted (`slot_bytes` with `engine.plan.steps`).
    """
    _check_profile(engine, "decode_breakdown", "traced_calls and step_bytes", modes, "steps", steps)
    gbps = ceiling_gbps()
    calls = traced_calls(engine, prompt_len)
    per_slot = slot_kernels(engine)
    context = prompt_len + 2 + (steps + 1) / 2 + steps     # the profiled run follows the timed one
    nbytes = slot_bytes(engine.config, round(context), engine.dtype, engine.plan.steps, engine.weight_format)
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
    """Profile `runs` prompts of `prompt_len` tokens on the GPU (each: a new sequence, the prompt, the
    first token read by the host), launched op by op ("eager") and replayed from the prompt chunks' CUDA
    graphs ("graph"); {mode name: Breakdown per prompt}. Resets the engine.

    A new sequence launches nothing (`Engine.reset`); the prompt's ids copied to the GPU show as `OTHER`. No
    bytes per slot: a prompt's traffic depends on its length and tiles (the weights once, plus activations).
    """
    _check_profile(engine, "prefill_breakdown", "traced_prefill_calls", modes, "runs", runs)
    calls = traced_prefill_calls(engine, prompt_len)
    per_slot = slot_kernels(engine, "prefill")
    ids = probe_prompt(engine, prompt_len)

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
LONG_PROMPTS = (1024, 4000)   # profiled at the fast level beside the 128-token prompt every level gets


def _runs_json(runs: dict[str, Breakdown]) -> dict:
    return {m: {"wall_us": b.wall_us, "kernel_us": b.kernel_us, "launches": b.launches, "kernels": b.kernels,
                "slots": b.slots} for m, b in runs.items()}


def prompt_table(record: dict, level: str = "fast", mode: str = "CUDA graph") -> str:
    """The prompts profiled at `level` in a profile record (`main`'s JSON), side by side: each slot's GPU time
    per prompt (us) and its share of the prompt's kernel time, slots in the order of the longest prompt,
    then the kernel time, the wall time and the launches. Markdown; "" when the record has no such prompt."""
    runs = sorted(((p["prompt_len"], p["runs"][mode]) for p in record.get("prefill_profiles", [])
                   if p["level"] == level and mode in p["runs"]), key=lambda lr: lr[0])
    if not runs:
        return ""
    by_len = {n: {r["slot"]: r for r in run["slots"]} for n, run in runs}
    longest = runs[-1][0]
    order = sorted({s for slots in by_len.values() for s in slots},
                   key=lambda s: -by_len[longest].get(s, {"us": 0.0})["us"])

    def cell(n, slot):
        r = by_len[n].get(slot)
        return "-" if r is None else f"{r['us']:.1f} ({100 * r['share']:.0f}%)"
    head = "| slot | " + " | ".join(f"{n} tokens: us (share)" for n, _ in runs) + " |"
    lines = [head, "|---" * (len(runs) + 1) + "|"]
    lines += [f"| `{slot}` | " + " | ".join(cell(n, slot) for n, _ in runs) + " |" for slot in order]
    for what, key, fmt in (("kernels", "kernel_us", "{:.1f} us"), ("wall", "wall_us", "{:.1f} us"),
                           ("launches", "launches", "{:.0f}")):
        lines.append(f"| {what} | " + " | ".join(fmt.format(run[key]) for _, run in runs) + " |")
    return "\n".join(lines)


def _prefill_report(engine, level: str, result: dict, prompt_len: int = 128) -> list[str]:
    """Profile a `prompt_len`-token prompt at this level into result["prefill_profiles"]; the markdown lines.
    A failure is reported, not raised: the decode profiles are still written."""
    title = f"## {level}, prefill of a {prompt_len}-token prompt"
    try:
        pre = prefill_breakdown(engine, prompt_len=prompt_len)
    except Exception as e:
        print(f"{level} prefill profile failed: {type(e).__name__}: {e}")
        return [f"{title}: failed ({type(e).__name__}: {e})\n"]
    result.setdefault("prefill_profiles", []).append({"level": level, "prompt_len": prompt_len,
                                                      "runs": _runs_json(pre)})
    print(f"{level} prefill {prompt_len}: " + "; ".join(
        f"{m} {b.wall_us:.0f} us wall, {b.kernel_us:.0f} us kernels" for m, b in pre.items()))
    return [f"{title}\n", "```", "\n\n".join(str(b) for b in pre.values()), "",
            pre["CUDA graph"].kernel_table(25), "```\n"]


def main(argv=None) -> int:
    """Profile the engine's decode step on the GPU, op by op and from the CUDA graph: every optimisation
    level at 128 cached tokens, the fast one at 4,096 too; each level's prefill of a 128-token prompt, the fast
    level's of LONG_PROMPTS too;
    writes profile_<gpu>_<date>.{json,md,png} (`--config qwen3.5-27b`: another size of the family, random
    weights of its shapes, profile_<config>_<gpu>_<date>.*)."""
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
        else:                                   # the long prompts of chapter 20_profile's prompt table
            for prompt_len in LONG_PROMPTS:
                text += _prefill_report(engine, level, result, prompt_len)
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
