"""A prompt chunk's CUDA graph in one piece, or in pieces of layers: what does its launch cost the first token?

    python -m lab.prefill_graph_probe [OUTDIR]    (on a GPU; writes OUTDIR/prefill_graph_probe_<gpu>_<date>.json)

Question: the engine replays a repeated prompt chunk from CUDA graphs (`Engine._prefill_graph`). A profile of the
fast level's 128-token prompt put 257.5-310.5 us of its 1.74-1.97 ms outside any kernel (results/profile_*: "with the
GPU idle"), where its decode step at 128 cached tokens leaves 14.5-35.6 us. A profiled run of the one graph
(NVIDIA H100 80GB HBM3, 2026-12-06, at bdaacc4:
lab/results/prefill_graph_probe_nvidia-h100-80gb-hbm3_2026-12-06_trace.json) found it before the first kernel:
the host spent 264-300 us in cudaGraphLaunch and the first kernel started 1 us after the call returned; the
GPU then ran the 237 kernels in 1,650-1,660 us. Unprofiled, `prefill` returned to the host
after 224 us and the first token came 1,767 us after `Engine.stream`'s call. A decode step hides its graph's
launch behind the step ahead; a prompt has none ahead. Does a graph in pieces win that time back?
Method: Qwen3.5-0.8B's shapes at the fast level (bf16, random weights, PDL where the GPU has it). For each
variant, a fresh set of prompt graphs: "one graph" (the whole chunk, what the engine captures) and "layer
pieces" (`Engine.PREFILL_PIECES`: pieces of 1, 2, 4, 8, ... layers, `graph.layer_pieces`, one graph each sharing
one memory pool, replayed in order). At
128 and 1,024 tokens: the time to the first token through `Engine.stream` (the clock from the call to the
first token handed out, the median and spread of RUNS after the capture), the 8 tokens compared between the
variants; then one prompt under torch.profiler: the host's time in each cudaGraphLaunch and the time from the
first launch call to the first kernel, and the GPU's span from its first kernel to its last.
Result: NVIDIA H100 80GB HBM3, 2026-12-07, at d6adae5
(lab/results/prefill_graph_probe_nvidia-h100-80gb-hbm3_2026-12-07.json), the median time to the first token over 15
runs (their spread): 128 tokens, one graph 1,775 us (144), layer pieces (5 graphs) 1,817 us (134); 1,024 tokens
4,135 us (259) against 4,063 us (122); the tokens the same. Profiled, the pieces brought the first kernel to 71 us
after the first launch call, against 440 us for the one graph, while the GPU's span over the prompt's kernels was
1,665 us with one graph and 1,677 us with the pieces (128 tokens). Unprofiled, the one graph's first token came 110
us after that span: most of the launch's host time in the trace is the profiler's, and the launch does not hold the
first token back by the hundreds of microseconds it showed there.
Verdict: not adopted: `Engine.PREFILL_PIECES` stays False (tritonllm_course/engine/engine.py): the pieces are no
faster at 128 tokens, and faster at 1,024 by less than either variant's spread. A faster prompt needs faster
kernels.
"""
import statistics
import time

import torch

from lab import common

LENGTHS = (128, 1024)
RUNS, NEW_TOKENS = 15, 8


def check(device="cpu") -> float:
    """The tiny engine's prompt run piece by piece against the whole chunk: the logits' largest relative error
    (0.0: bit for bit), and 1.0 where the pieces do not cover every layer once."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    from tritonllm_course.engine.graph import layer_pieces
    if any([i for p in layer_pieces(n) for i in p] != list(range(n)) for n in range(1, 65)):
        return 1.0
    engine = Engine.random(TINY, torch.float32, device, seed=0, max_seq_len=32, cuda_graph=False)
    ids = torch.arange(3, 3 + 13)
    engine.prefill_ids[:13].copy_(ids)
    engine._prefill_unchecked(13, 0, True)
    want = engine.counters.logits.clone()
    engine.reset()
    engine.prefill_ids[:13].copy_(ids)
    for piece in layer_pieces(TINY.num_hidden_layers):
        engine._prefill_unchecked(13, 0, True, piece)
    return common.rel_err(engine.counters.logits, want)


def _ttft(engine, prompt) -> tuple[float, list[int]]:
    """us from the call to the first token of `Engine.stream`, and the NEW_TOKENS tokens."""
    tokens, first = [], None
    t0 = time.perf_counter()
    for token in engine.stream(prompt, NEW_TOKENS, eos_token_id=None):
        if first is None:
            first = time.perf_counter()
        tokens.append(token)
    return (first - t0) * 1e6, tokens


def _launch_trace(engine, prompt) -> dict:
    """One prompt under the profiler: the host's cudaGraphLaunch calls, the first launch to the first kernel,
    and the GPU's span over the prompt's kernels."""
    from torch.profiler import ProfilerActivity, profile
    engine.reset()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        engine.prefill(prompt)
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    launches = [e for e in prof.events() if e.name == "cudaGraphLaunch"]
    kernels = [e for e in events if e.time_range.elapsed_us() > 0 and "Memcpy" not in e.name]
    if not launches or not kernels:
        return {"error": "no graph launch or kernel in the trace"}
    first = min(k.time_range.start for k in kernels)
    return {"launches": len(launches), "launch_host_us": [e.time_range.elapsed_us() for e in launches],
            "first_launch_to_first_kernel_us": first - launches[0].time_range.start,
            "gpu_span_us": max(k.time_range.end for k in kernels) - first, "kernels": len(kernels)}


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.engine.graph import layer_pieces
    path = common.result_path(out, "prefill_graph_probe")
    engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, level="fast",
                           max_seq_len=max(LENGTHS) + NEW_TOKENS + 8)
    res = common.header(check_rel_err=check("cuda"), pdl=engine.pdl, runs=RUNS, rows={})
    want = {}
    for name, split in {"one graph": False, "layer pieces": True}.items():
        with common.replaced(engine, "PREFILL_PIECES", split):
            engine._prefill_graphs.clear()
            engine._prefill_seen.clear()
            for T in LENGTHS:
                prompt = [(7 * i + 3) % QWEN35_0_8B.vocab_size for i in range(T)]
                for _ in range(3):                  # run op by op, captured, replayed
                    _ttft(engine, prompt)
                runs = [_ttft(engine, prompt) for _ in range(RUNS)]
                us = [r[0] for r in runs]
                want.setdefault(T, runs[0][1])
                row = {"ttft_us": statistics.median(us), "spread_us": max(us) - min(us),
                       "graphs": len(layer_pieces(QWEN35_0_8B.num_hidden_layers, split)),
                       "same_tokens": all(r[1] == want[T] for r in runs)}
                try:
                    row["trace"] = _launch_trace(engine, prompt)
                except Exception as e:  # noqa: BLE001  (recorded, not fatal)
                    row["trace"] = {"error": common.error_text(e)}
                res["rows"][f"{name}, {T} tokens"] = row
                print(name, T, row, flush=True)
                common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
