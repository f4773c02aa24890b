"""The 8-bit prompt GEMMs: the widened weight tile as the tensor cores' second operand, or as their first?

    python -m lab.quant_gemm_probe [OUTDIR]    (on an sm_90 GPU; PROBE_S=seconds bounds the GEMM sweep, default 150)
    (scripts/gpu_extras.sh quant runs it)

Question: with 8-bit weights (chapter 31_weight_quant) the fast level's time to the first token of 4,096 tokens
is about 21 ms against bf16's 15.7 (results/weights_nvidia-h200_2026-12-05.json), although both run their prompt
GEMMs through the TMA (`tritonllm_course/tma_gemm.py`, `SCALED`). Lowered for sm_90
(`tritonllm_course.lowering`), the 8-bit tile shows why: wgmma reads its second operand from shared memory only,
so the weight tile, copied to shared memory as 8 bits, loaded into registers and widened to bf16, is written
back to shared memory and fenced at every K step before the tensor cores read it (`ttg.local_alloc` of the
widened tile; 25 STS instructions at 128 x 128 on 4 warps, triton 3.7.1). Their first operand may come from
registers. Computing the transpose, W x^T (`SWAP_AB`), puts the widened tile there: the same tiles lower to
HGMMA with a register operand and 17 STS. Does that bring the 8-bit GEMMs to the bf16 TMA GEMM's speed (their
weight bytes are half), and the time to the first token with them?
Method: (1) the five prompt GEMMs of the fast level (`prompt_gemm_sweep.shapes`) at M = 512, 1,024 and 4,096,
weights of N(0, 1/K) quantized to int8 and to fp8 e4m3 with a scale a row (`reference.quant.quantize`): cuBLAS
on the bf16 weights (`torch.matmul`), the bf16 TMA GEMM at `tma_gemm.config`'s pick, the pointer
`quant_gemm_kernel` at `quant.gemm_config`'s pick, the 8-bit TMA GEMM (x W^T) at `config`'s pick, and W x^T at
`config`'s pick and at every tile of `SWAP_SPACE`; plain products (the fast level's 8-bit prompts run their
SwiGLU and residual adds apart, gate/up as one GEMM of 7,168 rows), each timed as `prompt_gemm_sweep` times (a
CUDA graph over copies past L2) and checked against the fp32 product of the dequantized weight (`rel_err`). (2)
The fast level's time to the first token at 1,024 and 4,096 tokens (`common.ttft_ms`, random weights of the real
shapes, PDL as the default) in int8 and fp8, the 8-bit GEMMs as they are, swapped at `config`'s tiles, and
swapped at each shape's fastest tiles of (1) (the nearest M measured), the three alternated twice, first tokens
compared.
Writes OUTDIR/quant_gemm_probe_<gpu>_<date>.json, saved after every case. `check` runs the swapped kernel
under the interpreter at odd shapes against the fp64 product of the dequantized weight.
Result: NVIDIA H200, 2026-12-05 (lab/results/quant_gemm_probe_nvidia-h200_2026-12-05.json; the figures in
lab/README.md). (1) Every 8-bit form stayed slower than the bf16 TMA GEMM and cuBLAS at every shape and
length: widening the weight costs more than its halved bytes save at these compute-bound sizes. fp8 gained from
W x^T in 13 of its 15 cases (every shape at 1,024 and 4,096 tokens), int8 in 5 (four of the five shapes at 1,024
tokens, one at 512, none at 4,096). (2) fp8's time to the first token was shorter with W x^T at 1,024 and 4,096
tokens, most at the sweep's tiles; int8's was not. First tokens identical across the variants of a format.
Verdict: adopted for fp8: `fp8_config` in tritonllm_course/tma_gemm.py (W x^T, tiles by a rule that gives the
sweep's fastest at 1,024 tokens and within 5% at 4,096); int8 keeps x W^T. The engine with `fp8_config` is not
timed yet (the rule's tiles are those of variant (2)'s "the sweep's tiles" at 1,024 tokens). Since then variant "as
it is" is x W^T at `config`'s bf16 tiles, as the engine ran both formats then.
"""
import os
import sys
import time

import torch
import triton

from lab import common
from lab.prompt_gemm_sweep import shapes
from tritonllm_course import tma_gemm
from tritonllm_course.reference import quant as Q

MS = (4096, 1024, 512)
FORMATS = ("int8", "fp8")
PROMPTS = (1024, 4096)
ROUNDS = 2
# W x^T tiles (BLOCK_M tokens, BLOCK_N weight rows: a multiple of wgmma's 64, BLOCK_K, warps, stages)
SWAP_SPACE = [(64, 128, 64, 4, 4), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 64, 64, 4, 3),
              (64, 64, 128, 4, 4), (256, 128, 64, 8, 3), (128, 256, 64, 8, 3)]


def _cfg(bm, bn, bk, warps, stages, swap=True) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages, "SWAP_AB": swap}


def check(device="cpu") -> float:
    """The swapped 8-bit tile against the fp64 product of the dequantized weight at odd shapes (partial tiles
    on every side), the output poisoned: the largest relative error."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for M, N, K in [(37, 24, 48), (5, 48, 32)]:
        x = torch.randn(M, K, generator=gen).to(device)
        for fmt in FORMATS:
            q, s, _ = Q.quantize((torch.randn(N, K, generator=gen) / K ** 0.5).to(device), fmt)
            y = torch.full((M, N), float("nan"), device=device)
            tma_gemm.launch(x, q, y, scale=s, cfg=_cfg(16, 16, 16, 4, 1))
            worst = max(worst, common.rel_err(y, x.double() @ Q.dequantize(q, s, dtype=torch.float64).T))
    return worst


def operand_sets(M, N, K, fmt):
    """Copies past L2 of the bf16 weight and its 8-bit form (one copy a set), x and y shared."""
    w0 = torch.randn(N, K, device="cuda") / K ** 0.5
    q0, s0, _ = Q.quantize(w0, fmt)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    bf0 = w0.to(torch.bfloat16)
    sets = []
    for i in range(common.copies_past_l2(N * K * 3, most=16)):
        sets.append({"x": x, "y": y, "w": bf0 if i == 0 else bf0.clone(), "q": q0 if i == 0 else q0.clone(),
                     "s": s0})
    return sets


def sweep(res, path, budget_s):
    """Part (1): every form at every shape, M and format; res["cases"] gets a row a timing."""
    from tritonllm_course import kernels
    from tritonllm_course.config import QWEN35_0_8B
    quant = kernels.load("quant", "solutions").module
    dev, t0 = torch.device("cuda"), time.time()
    for M in MS:
        for name, N, K, kind in shapes(QWEN35_0_8B):
            if kind == "gated":     # the 8-bit prompt's gate/up: one plain GEMM of [W_gate; W_up], SwiGLU apart
                name, N = "gate/up (stacked)", 2 * N
            for fmt in FORMATS:
                if time.time() - t0 > budget_s:
                    return
                sets = operand_sets(M, N, K, fmt)
                pick = tma_gemm.config(M, N, False, torch.bfloat16, dev)
                hand = quant.gemm_config(M, N, None, torch.bfloat16, dev)

                def pointer(s, c=hand):
                    grid = (triton.cdiv(M, c["BLOCK_M"]), triton.cdiv(N, c["BLOCK_N"]))
                    quant.quant_gemm_kernel[grid](s["x"], s["q"], s["s"], s["y"], M, N, K, 1, GROUP=0,
                                                  BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"],
                                                  num_warps=c["num_warps"], num_stages=c["num_stages"])
                forms = [("cuBLAS bf16", None, lambda s: torch.matmul(s["x"], s["w"].T, out=s["y"])),
                         ("TMA bf16", pick, lambda s: tma_gemm.launch(s["x"], s["w"], s["y"], cfg=pick)),
                         ("pointer 8-bit", hand, pointer),
                         ("TMA 8-bit x W^T", pick,
                          lambda s: tma_gemm.launch(s["x"], s["q"], s["y"], scale=s["s"], cfg=pick))]
                for c in [{**pick, "SWAP_AB": True}] + [_cfg(*t) for t in SWAP_SPACE]:
                    forms.append(("TMA 8-bit W x^T", c, lambda s, c=c: tma_gemm.launch(s["x"], s["q"], s["y"],
                                                                                          scale=s["s"], cfg=c)))
                # the fp32 products every form is checked against, once a case: of the bf16 weight and of the
                # dequantized 8-bit one
                x0 = sets[0]["x"].float()
                want = {False: x0 @ sets[0]["w"].float().T,
                        True: x0 @ Q.dequantize(sets[0]["q"], sets[0]["s"], dtype=torch.float32).T}
                for form, cfg, fn in forms:
                    print(f"  M={M} {name} {fmt}: {form} {cfg}", file=sys.stderr, flush=True)
                    row = {"M": M, "shape": name, "N": N, "K": K, "format": fmt, "form": form, "cfg": cfg}
                    try:
                        row["us"] = common.best_time_calls(lambda **s: fn(s), sets)
                        fn(sets[0])
                        row["rel_err"] = common.rel_err(sets[0]["y"], want["8-bit" in form])
                        row["tflops"] = 2 * M * N * K / row["us"] / 1e6
                    except Exception as e:      # a tile that does not compile or fit: named, the sweep goes on
                        row["error"] = common.error_text(e)
                    res["cases"].append(row)
                    print(row, flush=True)
                common.save(path, res)
                del sets, want
                torch.cuda.empty_cache()


def best_swapped(res) -> dict:
    """(N, K) -> [(M, the fastest W x^T config at M)] from the sweep's rows."""
    best = {}
    for r in res["cases"]:
        if r["form"] == "TMA 8-bit W x^T" and "us" in r and r["rel_err"] < 1e-2:
            key = (r["N"], r["K"], r["M"], r["format"])
            if key not in best or r["us"] < best[key]["us"]:
                best[key] = r
    table = {}
    for (N, K, M, fmt), r in best.items():
        table.setdefault((N, K, fmt), []).append((M, r["cfg"]))
    return table


def swapped_launch(original, table=None, fmt=None, swap=True):
    """`tma_gemm.launch` giving 8-bit GEMMs W x^T (`swap`, else x W^T): at `config`'s bf16 tiles, or at the
    sweep's fastest for the shape (the nearest M measured), where `table` has it."""
    def launch(x, weight, out, *args, cfg=None, scale=None, **kwargs):
        if scale is not None and cfg is None:
            M, N, K = x.shape[0], weight.shape[0], x.shape[1]
            cfg = {**tma_gemm.config(M, N, kwargs.get("up") is not None, x.dtype, x.device), "SWAP_AB": swap}
            if table and (N, K, fmt) in table and kwargs.get("up") is None:
                cfg = min(table[(N, K, fmt)], key=lambda mc: abs(mc[0] - M))[1]
        return original(x, weight, out, *args, cfg=cfg, scale=scale, **kwargs)
    return launch


def ttft(res, path):
    """Part (2): the fast level's TTFT by format and variant, alternated."""
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    table = best_swapped(res)
    gen = torch.Generator().manual_seed(0)
    prompts = {n: torch.randint(0, QWEN35_0_8B.vocab_size, (n,), generator=gen).tolist() for n in PROMPTS}
    original = tma_gemm.launch
    for fmt in FORMATS:
        # "as it is": x W^T at config's bf16 tiles, as the engine ran every 8-bit GEMM when this was measured
        variants = {"as it is": swapped_launch(original, swap=False),
                    "swapped, config's tiles": swapped_launch(original),
                    "swapped, the sweep's tiles": swapped_launch(original, table, fmt)}
        # an engine a variant: a prompt chunk's CUDA graph keeps the kernels it was captured with
        engines = {name: Engine.random(QWEN35_0_8B, torch.bfloat16, "cuda", seed=0, max_seq_len=max(PROMPTS) + 64,
                                       level="fast", weight_format=fmt) for name in variants}
        for rnd in range(ROUNDS):
            for name, launch in variants.items():
                row = {"format": fmt, "round": rnd, "variant": name, "ttft_ms": {}, "first_token": {}}
                with common.replaced(tma_gemm, "launch", launch):
                    for n, prompt in prompts.items():
                        row["ttft_ms"][n], row["first_token"][n] = common.ttft_ms(engines[name], prompt)
                res["ttft"].append(row)
                print(row, flush=True)
                common.save(path, res)
        del engines
        torch.cuda.empty_cache()


def main(out):
    common.setup()
    path = common.result_path(out, "quant_gemm_probe")
    res = common.header(check_rel_err=check("cuda"), cases=[], ttft=[])
    common.save(path, res)
    torch.manual_seed(0)
    sweep(res, path, float(os.environ.get("PROBE_S", "150")))
    ttft(res, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(common.out_dir())
