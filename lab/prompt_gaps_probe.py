"""Where does a prompt's idle GPU time go: before the first kernel, between kernels, or after the last?

    python -m lab.prompt_gaps_probe [OUTDIR]   (on a GPU; writes OUTDIR/prompt_gaps_probe_<gpu>_<date>.json;
                                               PROMPTS="128 1024 4000" the prompt lengths, RUNS the prompts
                                               profiled at each)

Question: the fast level's prompt profile from its CUDA graphs (results/profile_nvidia-h100-80gb-hbm3_2026-12-06.json,
`profiling.prefill_breakdown`) has the GPU idle, wall time less kernel time, for 310 us of the 128-token prompt,
633 us at 1,024 tokens and 1,553 us at 4,000: the idle grows with the prompt while the launches stay 241-259.
Which part of a prompt is it: the host's work before the first kernel (the ids checked and copied, the graph
launched), gaps between the device's work, or the host's after the last (the first token read back)?
Method: the fast level of Qwen3.5-0.8B (random weights of the real shapes, bf16, PDL, its prompt graphs), each
prompt as `prefill_breakdown` runs it: a new sequence (`Engine.reset`), `Engine.prefill`, the first token read by
the host. At each length of PROMPTS (default 128, 1,024 and 4,000): the wall time of RUNS (default 3) prompts after
two untimed (`common.ttft_runs_ms`; the chunk's graph is captured at its second use), then RUNS more under
torch.profiler, CPU and CUDA activities, each prompt inside a named range and its phases in ranges of their own
(`PHASES`: the ids checked, the chunks' graphs replayed, the first token's LM head and pick launched, the token
read). Per prompt, on the profiler's one timeline (`gap_report`): the head (the prompt's start to its first device
event), the device's busy time (the union of its kernels, copies and memsets), the gaps between them, the tail (the
last device event's end to the prompt's end), and the largest gaps with the events on either side. `check` runs
`gap_report` on a made-up timeline whose answer is known (overlapping events counted once).
Result: NVIDIA H100 80GB HBM3, 2026-12-07, at 5a812b0
(lab/results/prompt_gaps_probe_nvidia-h100-80gb-hbm3_2026-12-07.json; triton 3.6.0, torch 2.11.0), the second
and third profiled prompts of each length (the first carries the profiler's start: 3.0-4.0 ms of head), us:
  128 tokens: wall 2,420-2,495 (1.91-1.97 ms unprofiled), head 169-207, busy 1,686-1,694, gaps 497-524, tail 68-70;
  1,024: wall 4,821-4,917 (4.15-4.34 ms unprofiled), head 293-321, busy 3,714-3,715, gaps 757-811, tail 56-70;
  4,000: wall 14,445-14,640 (14.08-14.13 ms unprofiled), head 608-672, busy 13,034-13,037, gaps 693-819,
  tail 106-115.
At every length one gap is most of the gaps: from the ids' copy to the GPU to the graph's first kernel,
480-509, 622-677 and 596-722 us, while the host is inside the graph's launch (`replay`: 490-503, 630-658 and
547-688 us); all the others add 15-16, 134-135 and 97-98 us. What grows with the prompt is the head, the
host's work before that launch: the ids checked (`check`: 41-51, 119-125 and 298-350 us) and copied. The first
token's LM head and pick are launched (`next`, 408-525 us on the host) while the graph runs, and cost no idle.
All of it under the profiler, which slows the host: unprofiled, the GPU's idle is the wall less about the busy
time above, some 0.2-0.3 ms at 128 tokens and 1.0-1.1 ms at 4,000.
Verdict: not adopted: a diagnosis, nothing changed. Where a change would go: the ids' check and copy at C speed
in one pass (tritonllm_course/engine/engine.py `check_tokens` and `_prefill`), and the graph's launch, which
lab/prefill_graph_probe.py found no sooner in pieces.
"""
import contextlib
import os
import statistics

import torch

from lab import common
from tritonllm_course.measure.trace import busy_us

PHASES = ("check", "replay", "next", "read")     # the named ranges inside a prompt, in order
TOP = 5                                          # the largest gaps kept per prompt


def gap_report(prompt: tuple[float, float], phases: dict[str, list[tuple[float, float]]],
               events: list[tuple[str, float, float]]) -> dict:
    """One prompt's timeline: its host range `prompt` (start, end), its `phases` (name -> host ranges) and the
    device `events` (name, start, end) that ran inside it, all in us on one clock. The head (prompt start to the
    first event's start), busy (the union of the events), gaps (the idle between the first start and the last
    end: their sum and the TOP largest with the events on either side), tail (the last end to the prompt's end)
    and each phase's host time."""
    p0, p1 = prompt
    events = sorted(events, key=lambda e: e[1])
    phase_us = {name: sum(e - s for s, e in ranges) for name, ranges in phases.items()}
    if not events:
        return {"wall_us": p1 - p0, "head_us": p1 - p0, "busy_us": 0.0, "gaps_us": 0.0, "tail_us": 0.0,
                "events": 0, "top_gaps": [], "phase_us": phase_us}
    gaps, reach, before = [], events[0][1], events[0][0]
    for name, s, e in events:
        if s > reach:                        # idle from the latest end so far to this start
            gaps.append((s - reach, before, name))
        if e > reach:
            reach, before = e, name
    busy = busy_us([e[1] for e in events], [e[2] for e in events])
    gaps.sort(key=lambda g: -g[0])
    return {"wall_us": p1 - p0, "head_us": events[0][1] - p0, "busy_us": busy,
            "gaps_us": sum(g[0] for g in gaps), "tail_us": max(0.0, p1 - reach), "events": len(events),
            "top_gaps": [{"us": g, "after": a, "before": b} for g, a, b in gaps[:TOP]], "phase_us": phase_us}


def check(device="cpu") -> float:
    """`gap_report` on a made-up timeline: a prompt from 0 to 100 us, events a [10, 20], b [15, 30] (overlapping
    a: counted once), c [40, 50], d [52, 90]; head 10, busy 20 + 10 + 38 = 68, gaps 10 (b to c) and 2 (c to d),
    tail 10. 0.0 when every figure is right, 1.0 otherwise."""
    got = gap_report((0.0, 100.0), {"check": [(0.0, 4.0)], "read": [(90.0, 99.0), (99.0, 100.0)]},
                     [("c", 40.0, 50.0), ("a", 10.0, 20.0), ("d", 52.0, 90.0), ("b", 15.0, 30.0)])
    want = {"wall_us": 100.0, "head_us": 10.0, "busy_us": 68.0, "gaps_us": 12.0, "tail_us": 10.0, "events": 4,
            "top_gaps": [{"us": 10.0, "after": "b", "before": "c"}, {"us": 2.0, "after": "c", "before": "d"}],
            "phase_us": {"check": 4.0, "read": 10.0}}
    return 0.0 if got == want else 1.0


@contextlib.contextmanager
def phase_ranges(engine):
    """The engine's prompt path with its phases inside named profiler ranges: the ids checked
    (`check_tokens`), each chunk graph replayed (the steps `_prefill_graph` returns), the first token's LM head
    and pick launched (`_next_token`)."""
    from torch.profiler import record_function

    def ranged(name, fn):
        def run(*args, **kwargs):
            with record_function(name):
                return fn(*args, **kwargs)
        return run

    def graphs(*args, _fn=engine._prefill_graph, **kwargs):
        steps = _fn(*args, **kwargs)
        return None if steps is None else [ranged("replay", step) for step in steps]

    with contextlib.ExitStack() as stack:
        stack.enter_context(common.replaced(engine, "check_tokens", ranged("check", engine.check_tokens)))
        stack.enter_context(common.replaced(engine, "_prefill_graph", graphs))
        stack.enter_context(common.replaced(engine, "_next_token", ranged("next", engine._next_token)))
        yield


def profiled(engine, prompt: list[int], runs: int) -> list[dict]:
    """`gap_report` of each of `runs` prompts run under torch.profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function
    with phase_ranges(engine), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            with record_function("prompt"):
                engine.reset()
                engine.prefill(prompt)
                with record_function("read"):
                    int(engine.counters.ids[0])
        torch.cuda.synchronize()
    ranges = {}
    device = []
    for e in prof.events():
        span = (e.time_range.start, e.time_range.end)
        if e.device_type == DeviceType.CUDA:
            if not getattr(e, "is_user_annotation", False):
                device.append((e.name, *span))
        elif e.name == "prompt" or e.name in PHASES:
            ranges.setdefault(e.name, []).append(span)
    prompts = sorted(ranges.get("prompt", []))
    assert len(prompts) == runs, f"{len(prompts)} prompt ranges traced for {runs} prompts"
    reports = []
    for p0, p1 in prompts:
        inside = lambda s: p0 <= s < p1       # noqa: E731 (a range's test, read once below)
        phases = {name: [r for r in ranges.get(name, []) if inside(r[0])] for name in PHASES}
        reports.append(gap_report((p0, p1), phases, [ev for ev in device if inside(ev[1])]))
    return reports


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    prompts = [int(p) for p in os.environ.get("PROMPTS", "128 1024 4000").split()]
    runs = int(os.environ.get("RUNS", "3"))
    path = common.result_path(out, "prompt_gaps_probe")
    res = common.header(check=check(), prompts=prompts, runs=runs, rows=[])
    common.save(path, res)
    engine = Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0,
                           max_seq_len=max(prompts) + 8, level="fast")
    for length in prompts:
        prompt = [(7 * i + 3) % QWEN35_0_8B.vocab_size for i in range(length)]
        walls, _ = common.ttft_runs_ms(engine, prompt, runs)    # its chunk's graph captured in the two untimed
        reports = profiled(engine, prompt, runs)
        mean = {key: statistics.mean(r[key] for r in reports)
                for key in ("wall_us", "head_us", "busy_us", "gaps_us", "tail_us")}
        phases = {name: statistics.mean(r["phase_us"][name] for r in reports) for name in PHASES}
        common.keep_row(res, path, {"prompt": length, "wall_ms": walls, "profiled_mean_us": mean,
                                    "phase_mean_us": phases, "prompts": reports})
    return res


if __name__ == "__main__":
    main(common.out_dir())
