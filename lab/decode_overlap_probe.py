"""How much of a decode token is the host's? Reading each token right after its step, against queuing ahead.

    python -m lab.decode_overlap_probe [OUTDIR]  (on a GPU; writes OUTDIR/decode_overlap_<gpu>_<date>.json)

Question: the next decode step needs nothing from the host: it reads the token from device memory. A loop
that replays a step and then reads its token (`int(counters.ids[0])`: a sync) leaves the GPU idle while
the host wakes up and launches the next replay. How long is that, per token?
Method: Qwen3.5-0.8B's shapes (fast level, bf16, random weights, context 128), 64 steps, the median of 7
runs of each loop: (1) "token loop (stream)": that read after every step (what `Engine.stream` did before
it went one step ahead); (2) the same replays queued with no read between them; (3) "one ahead": step
n+1 queued before token n is read, each token copied to pinned memory behind its step (what
`Engine.stream` does now, with `TokenReader`); (4) `Engine.stream` itself. (1) - (2) is the host's share;
every loop must give the same tokens.
Result: NVIDIA H200, 2026-11-30 (lab/results/decode_overlap_nvidia-h200_2026-11-30.json, before the
change, loops 1-3): 0.753 ms a token read after each step, 0.729 queued, 0.729 one ahead; after it, on
another machine of the same kind (lab/results/decode_overlap_nvidia-h200_2026-11-30_after.json): 0.731,
0.725 and 0.725. The host's share of a token is 6-24 us, and the loop one step ahead removes it; the
tokens were the same in every run.
Verdict: adopted in tritonllm_course/engine/engine.py: `Engine.stream` queues the step that consumes token
n before the host reads token n (`TokenReader`). The engine's table moved 0.736 -> 0.721 ms a token at
128 cached tokens (lab/results/engine_runs/prefill_gates_norm/ -> one_ahead/, with the recurrence on one
warp in the same run).
"""
import statistics
import time

import torch

from lab import common


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    from tritonllm_course.engine.engine import TokenReader
    path = common.result_path(out, "decode_overlap")
    steps, context = 64, 128
    engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=context + 4 * steps + 8,
                           level="fast")
    prompt = list(range(1000, 1000 + context))
    step = engine._graph(None)
    ids = engine.counters.ids
    pinned = torch.empty(steps, dtype=ids.dtype, pin_memory=True)

    def ready() -> float:           # a fresh sequence after the prompt, the GPU idle: the clock starts
        engine.reset()
        engine.prefill(prompt)
        torch.cuda.synchronize()
        return time.perf_counter()

    def loop():                     # (1) a read after every step (Engine.stream before it went one step ahead)
        t0, tokens = ready(), []
        for _ in range(steps):
            engine.decode()
            tokens.append(int(ids[0]))
        return (time.perf_counter() - t0) / steps, tokens

    def queued():                   # (2) every replay queued, one sync at the end
        t0 = ready()
        for i in range(steps):
            step()
            pinned[i:i + 1].copy_(ids[:1], non_blocking=True)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / steps, pinned.tolist()

    def one_ahead():                # (3) step n+1 queued before token n is read (Engine.stream's TokenReader)
        t0, tokens, reader = ready(), [], TokenReader(ids)
        for _ in range(steps):
            step()
            reader.push()
            if len(reader.queue) == 2:
                tokens.append(reader.pop())
        tokens.append(reader.pop())
        return (time.perf_counter() - t0) / steps, tokens

    def stream():                   # (4) the engine's own loop
        t0, tokens = None, []
        for token in engine.stream(prompt, steps + 1, eos_token_id=None):
            if t0 is None:          # after the prefill's token: time the steps alone
                t0 = time.perf_counter()
            else:
                tokens.append(token)
        return (time.perf_counter() - t0) / steps, tokens

    res = common.header(context=context, steps=steps, rows={})
    want = None
    for name, fn in (("token loop (stream)", loop), ("queued, no host read", queued), ("one ahead", one_ahead),
                     ("Engine.stream", stream)):
        fn()
        runs = [fn() for _ in range(7)]
        ms = statistics.median(r[0] for r in runs) * 1e3
        want = want or runs[0][1]
        res["rows"][name] = {"ms_per_token": ms, "same_tokens": all(r[1] == want for r in runs)}
        print(name, res["rows"][name], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
