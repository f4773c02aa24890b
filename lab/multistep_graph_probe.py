"""Several decode steps in one CUDA graph: what do the boundaries between the engine's replays cost a token?

    python -m lab.multistep_graph_probe [OUTDIR]  (on a GPU; writes OUTDIR/multistep_graph_<gpu>_<date>.json)

Question: the engine replays one graph per token (`Engine._graph`). Between two replays the last kernel of a step
drains before the first of the next starts (PDL's overlap does not cross a graph's edge), the host's replay call
comes in between, and the token's copy to pinned memory is a node of its own. `lab/pdl_step_profile.py` puts the
step's kernels below the bench's time a token (lab/results/pdl_step_profile_nvidia-h200_2026-12-02.json beside
results/engine_nvidia-h200_2026-12-02_pdl). How much of that goes when one replay runs K steps?
Method: Qwen3.5-0.8B's shapes at the fast level (bf16, random weights, PDL where the GPU has it), a 128-token
prompt, then 64 decode tokens a run, the median of 7 runs, every loop queued with no host read until the end
(`decode_overlap_probe` showed the engine's one-step-ahead loop costs what that costs). Variants:
(1) "1 step a graph": the engine's own graph, each token copied to pinned memory behind it (what `Engine.stream`
does); (2) "K steps, copy between": K = 2, 4, 8 steps captured in one graph, each step's token and logits flag
copied into a device ring by a device-to-device copy (a copy node: the next step starts when this one has
finished, as at a graph's edge), one copy of the ring to pinned memory a replay; (3) "K steps, kernel between":
the same with the ring written by a one-program kernel launched without PDL's overlap (a kernel node rather than
a copy node); (4) "K steps, PDL across": that kernel launched with PDL, so each step's first kernel may start
while the step before drains. (4) is timed to show what the overlap across steps would be worth, and is not
safe as it stands: the recurrence reads its state before its wait (solutions/layer_fusion.py), which is only
right when the step that wrote it has finished. Times by CUDA events from the first replay to the last copy
and by the host's clock to the end; every variant's tokens and flags against (1)'s.
Result: NVIDIA H200, 2026-12-05 (lab/results/multistep_graph_nvidia-h200_2026-12-05.json; triton 3.6), us a
token (spread over 7 runs): one step a graph 638.4 (1.8); copy between 635.3 / 634.6 / 633.3 at 2 / 4 / 8 steps
(2.0 / 1.6 / 1.6); kernel between 635.5 / 635.1 / 634.3; PDL across 634.0 / 631.1 / 631.8. The host's clock
agrees within 1.2 us. Every variant gave the same tokens, flags clear.
Verdict: not adopted: 8 steps a graph save 4-5 us a token (0.6-0.8%) in the safe forms and 7 us with PDL across
the steps' edges. So the gap between the bench and the step's kernel time is not at the replays' edges;
`Engine.stream` (tritonllm_course/engine/engine.py) keeps one step a replay and its one-step-ahead loop.
"""
import statistics
import time

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.triton_helpers import pdl_enter

KS = (2, 4, 8)
STEPS, CONTEXT, RUNS = 64, 128, 7


@triton.jit
def record_kernel(out_ptr, ring_ptr, PDL: tl.constexpr):
    """ring[0:2] = out[0:2]: a step's token and its logits flag, kept for the host."""
    pdl_enter(PDL)
    i = tl.arange(0, 2)
    tl.store(ring_ptr + i, tl.load(out_ptr + i))


def check(device="cpu") -> float:
    """The ring kernel copies a step's token and flag (returns 0.0 when they arrive intact)."""
    out = torch.tensor([123456789, 2], dtype=torch.int64, device=device)
    ring = torch.full((3, 2), -1, dtype=torch.int64, device=device)
    record_kernel[(1,)](out, ring[1], PDL=False)
    want = torch.tensor([[-1, -1], [123456789, 2], [-1, -1]], dtype=torch.int64)
    return 0.0 if torch.equal(ring.cpu(), want) else 1.0


def _multistep(engine, k: int, ring: torch.Tensor, between: str):
    """K decode steps captured in one graph; after step i, the counters' [token, flag] go to ring[i]."""
    from tritonllm_course import validate
    from tritonllm_course.runtime import no_launch_overlap, pdl_args
    from tritonllm_course.engine.graph import GraphedStep

    def steps():
        for i in range(k):
            with validate.no_device_checks(), engine._launches():
                engine._decode_fn(None)
                if between == "copy":
                    ring[i].copy_(engine.counters.out)
                elif between == "kernel":
                    with no_launch_overlap():
                        record_kernel[(1,)](engine.counters.out, ring[i], **pdl_args())
                else:
                    record_kernel[(1,)](engine.counters.out, ring[i], **pdl_args())

    state = [*engine._cache_tensors(), engine.counters.out, engine.counters.steps, ring]
    return GraphedStep(steps, state)


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    path = common.result_path(out, "multistep_graph")
    engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=CONTEXT + STEPS + 16,
                           level="fast")
    prompt = list(range(1000, 1000 + CONTEXT))
    pinned = torch.empty(STEPS, 2, dtype=torch.int64, pin_memory=True)
    res = common.header(check_rel_err=check("cuda"), context=CONTEXT, steps=STEPS, runs=RUNS, pdl=engine.pdl,
                        rows={})

    def timed(replay, k, copy_out):
        """One run: the prompt, then STEPS / k replays queued, each followed by its tokens' copy."""
        engine.reset()
        engine.prefill(prompt)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for n in range(STEPS // k):
            replay()
            copy_out(pinned[n * k:(n + 1) * k])
        end.record()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / STEPS
        return start.elapsed_time(end) / STEPS * 1e3, wall * 1e6, pinned.clone()

    variants = {"1 step a graph": (1, engine._graph(None),
                                   lambda dst: dst.copy_(engine.counters.out[None], non_blocking=True))}
    for between, label in (("copy", "copy between"), ("kernel", "kernel between"), ("pdl", "PDL across")):
        for k in KS:
            ring = torch.zeros(k, 2, dtype=torch.int64, device="cuda")
            try:
                graph = _multistep(engine, k, ring, between)
            except Exception as e:  # noqa: BLE001  (a variant that cannot be captured is recorded)
                res["rows"][f"{k} steps, {label}"] = {"error": common.error_text(e)}
                continue
            variants[f"{k} steps, {label}"] = (k, graph,
                                               lambda dst, r=ring: dst.copy_(r, non_blocking=True))
    want = None
    for name, (k, graph, copy_out) in variants.items():
        timed(graph, k, copy_out)                     # a warm run
        runs = [timed(graph, k, copy_out) for _ in range(RUNS)]
        want = runs[0][2] if want is None else want
        us = [r[0] for r in runs]
        res["rows"][name] = {"steps_a_graph": k, "us_per_token": statistics.median(us),
                             "spread_us": max(us) - min(us),
                             "host_us_per_token": statistics.median(r[1] for r in runs),
                             "same_tokens": all(torch.equal(r[2], want) for r in runs),
                             "flags_clear": all(not r[2][:, 1].any() for r in runs)}
        print(name, res["rows"][name], flush=True)
        common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
