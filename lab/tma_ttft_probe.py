"""What does the TMA form of the prompt GEMMs give the engine's time to the first token, and PDL at long prompts?

    python -m lab.tma_ttft_probe [OUTDIR]     (on an sm_90 GPU)

Question: `tritonllm_course/tma_gemm.py` replaced the pointer-based tiles of the prompt's GEMMs (the
in-projections, the gate/up + SwiGLU, the GEMM + residual) from `tma_gemm.MIN_M` tokens on sm_90 GPUs,
1.2-1.4x faster a GEMM in `lab/prompt_gemm_sweep.py`. How much of that reaches the time to the first token?
And is the engine with PDL (the default on sm_90) as fast at long prompts as with pdl=False? Its long chunks
launch without the overlap, the same kernels, yet a bench on an H100 (2026-12-05,
lab/results/ttft_tma_nvidia-h100-80gb-hbm3_2026-12-05.json, the PDL row measured after the other) had it at
19.58 against 16.57 ms at 4,000 tokens.
Method: Qwen3.5-0.8B's shapes, random weights, bf16, three engines at the fast level (`Engine.random`, the
default 4,096-token chunks, CUDA graphs): the default (the TMA form, PDL), the same with pdl=False, and one with
`tma_gemm.MIN_M` raised past every prompt (the pointer kernels, PDL), each captured under its own setting.
Prompts of 128 (below MIN_M: the same GEMM kernels everywhere), 1,024 and 4,000 tokens; `common.ttft_ms` (two
untimed runs, the median of five), the engines alternated over ROUNDS rounds; the first tokens compared.
Writes OUTDIR/tma_ttft_probe_<gpu>_<date>.json.
Result: NVIDIA H200, 2026-12-05, triton 3.6, two rounds (lab/results/tma_ttft_probe_nvidia-h200_2026-12-05.json).
At 4,000 tokens: the TMA form with PDL 15.76-15.99 ms, with pdl=False 15.09-15.76 ms, the pointer GEMMs
16.34-16.70 ms; at 1,024: 4.69-4.74, 4.54-4.73 and 5.02-5.10 ms. At 128 tokens (the same kernels in all three)
1.74-1.88 ms. The TMA form saves 7% at 1,024 tokens and 4% at 4,000; PDL costs 2-3% at those lengths over the
two rounds (3.3% and 4.4% in the first, 0.2% and 1.5% in the second), about the spread of one engine between
rounds. The first tokens agreed everywhere.
Again on an NVIDIA H100 80GB HBM3 after the delta rule took chunks of 64 with its split first kernel (2026-12-06,
lab/results/tma_ttft_probe_nvidia-h100-80gb-hbm3_2026-12-06.json): at 4,000 tokens the TMA form with PDL
14.62-16.35 ms, with pdl=False 14.72-16.31 ms, the pointer GEMMs 15.06 ms; at 1,024 4.23-4.71, 4.64-4.71 and
5.00-5.10 ms; at 128 1.81-1.90 ms with PDL. PDL cost at most 0.2% (4,000 tokens, first round) and was faster in
the second round everywhere; the TMA engines' two rounds differ by a tenth at 4,000 tokens.
Verdict: adopt the TMA form from MIN_M tokens on sm_90, as `tritonllm_course/tma_gemm.py` does. PDL at long
prompts costs a few percent at most (nothing measurable on the H100 after the split), not the 17-18% of one bench
run at 1,024 and 4,000 tokens (lab/results/ttft_tma_nvidia-h100-80gb-hbm3_2026-12-05.json): the engine keeps it
(decode needs it), and the prompt's own kernels are where the rest of the gap to the targets lies.
"""
import torch

from lab import common

PROMPTS = (128, 1024, 4000)
ROUNDS = 2
NEVER = 1 << 30            # a MIN_M no prompt reaches: the pointer kernels everywhere


def main(out):
    common.setup()
    from tritonllm_course import tma_gemm
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    path = common.result_path(out, "tma_ttft_probe")
    res = common.header(what="time to the first token (ms), fast level, graphs: TMA GEMMs against pointer ones, "
                        "with and without PDL",
                        min_m=tma_gemm.MIN_M, rows=[])
    gen = torch.Generator().manual_seed(0)
    prompts = {n: torch.randint(0, QWEN35_0_8B.vocab_size, (n,), generator=gen).tolist() for n in PROMPTS}
    variants = {"tma": ("tma", None), "tma, pdl=False": ("tma", False), "pointer": ("pointer", None)}
    engines = {name: Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=max(PROMPTS) + 64,
                                   level="fast", pdl=pdl) for name, (_, pdl) in variants.items()}
    min_m = {"tma": tma_gemm.MIN_M, "pointer": NEVER}
    for rnd in range(ROUNDS):
        for name, engine in engines.items():
            gemm = variants[name][0]
            row = {"round": rnd, "variant": name, "pdl": engine.pdl, "ttft_ms": {}, "first_token": {}}
            with common.replaced(tma_gemm, "MIN_M", min_m[gemm]):
                for n, prompt in prompts.items():
                    row["ttft_ms"][n], row["first_token"][n] = common.ttft_ms(engine, prompt)
            common.keep_row(res, path, row)
    return res


if __name__ == "__main__":
    main(common.out_dir())
