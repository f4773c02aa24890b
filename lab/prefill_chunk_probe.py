"""How long a prompt chunk should the engine take?

    python -m lab.prefill_chunk_probe [OUTDIR]     (on a GPU)

Question: the engine runs a prompt in chunks of `prefill_chunk` tokens (512 by default before this probe),
each chunk a pass over every weight. A 4,000-token prompt is eight passes; its GEMMs see M = 512 where they
could see M = 4,000. What does the time to the first token do as the chunk grows, at the fast level, replayed
from the chunks' graphs?
Method: Qwen3.5-0.8B's shapes, random weights, bf16, `Engine.random(level="fast", prefill_chunk=C)` for C in
512, 1024, 2048, 4096; prompts of 128, 1024 and 4000 tokens; each prompt run twice untimed (a chunk's graph is
captured at its second use), then the median of five by the host's clock (the cache reset, the prompt, the first
token read by the host, as `engine_bench` times it). The first token of each chunk size is compared with the
512-token chunks' (a longer chunk sums in another order: equal tokens are reported, not promised).
Writes OUTDIR/prefill_chunk_probe_<gpu>_<date>.json.
Result: NVIDIA H200, 2026-12-05 (lab/results/prefill_chunk_probe_nvidia-h200_2026-12-05.json). Time to the first
token, chunks of 512 / 1,024 / 2,048 / 4,096 tokens: 4,000-token prompt 33.3 / 24.4 / 19.8 / 17.5 ms; 1,024
tokens 7.87 / 5.86 / 5.84 / 5.88 ms; 128 tokens 1.94 / 1.76 / 1.82 / 1.78 ms (one chunk whatever the size).
The first token was the same at every chunk size.
Verdict: adopted: the Engine's default prefill_chunk = 4096 (PREFILL_CHUNK, tritonllm_course/engine/arguments.py). A
chunk's GEMMs at M = 512 ran far below the tensor cores' rate (the 1,024-row output projections' GEMM + residual 28 us
a call in a per-kernel profile of a 4,000-token prompt, 2026-12-05, not saved), and each chunk reads every weight
again.
"""

import torch

from lab import common

CHUNKS = (512, 1024, 2048, 4096)
PROMPTS = (128, 1024, 4000)


def main(out):
    common.setup()
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    path = common.result_path(out, "prefill_chunk_probe")
    res = common.header(what="time to the first token (ms) by prompt chunk, fast level, graphs", rows=[])
    gen = torch.Generator().manual_seed(0)
    prompts = {n: torch.randint(0, QWEN35_0_8B.vocab_size, (n,), generator=gen).tolist() for n in PROMPTS}
    first = {}
    for chunk in CHUNKS:
        engine = Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=max(PROMPTS) + 64,
                               level="fast", prefill_chunk=chunk)
        row = {"prefill_chunk": chunk, "ttft_ms": {}, "first_token": {}}
        for n, prompt in prompts.items():
            row["ttft_ms"][n], token = common.ttft_ms(engine, prompt)
            row["first_token"][n] = token
            first.setdefault(n, token)
            row.setdefault("same_first_token_as_512", {})[n] = token == first[n]
        common.keep_row(res, path, row)
        del engine
        torch.cuda.empty_cache()
    return res


if __name__ == "__main__":
    main(common.out_dir())
