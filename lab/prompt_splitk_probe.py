"""Split-K in two kernels for the 128-token prompt's GEMM + residual: more programs an SM, no serial reduction?

    python -m lab.prompt_splitk_probe [OUTDIR]    (on a GPU; writes OUTDIR/prompt_splitk_probe_<gpu>_<date>.json;
                                                   PROBE_S=seconds bounds the sweep, default 150)

Question: at 128 tokens the GEMM + residual (o_proj / out_proj 1,024 x 2,048, down 1,024 x 3,584) takes 8-11 us for
4-7 MB of weights, latency-bound with one program an SM (`lab/prompt_gemm_ncu_probe.py`), and a split-K form
whose last-arriving program adds the pieces (`lab/prefill_probe.py`) bought 1 us at one shape only. That form
makes one program read every piece of its tile in turn, after all the others finished. Does a split-K in two
kernels, the pieces in fp32 to a workspace [SPLIT, M, N] and a second kernel adding them in a fixed order with the
residual (every output element in its own lane, all SMs at once), beat the engine's kernel and `torch.addmm`?
And the in-projections (8,224 x 1,024 for DeltaNet, 5,120 x 1,024 for attention), 10 us a call at 128 tokens, the
engine's GEMM level with cuBLAS: does the same split, without the residual, take them nearer their bytes?
Method: bf16, M = 128, the four shapes (a quarter of PROBE_S each), operands cycled past L2
(`common.best_time_calls`: a CUDA graph replayed over copies), each call the whole product (both kernels for the
two-kernel form). (1) The engine's `linear_residual` (its config's pick, solutions/layer_fusion.py; `linear`,
solutions/linear.py, for the in-projections), (2) cuBLAS `torch.addmm` (the residual in its epilogue; `torch.matmul`
for the in-projections), (3) the one-kernel split-K of `lab/prefill_probe.py` at its best tiles, (4) the two-kernel
form over tiles of 64-128 rows, 16-128 columns, SPLIT 2-16 (the one-kernel form for the GEMM + residual only). Each
form's fastest config is run once more against the fp64 product (`rel_err`). Then (5) the time to the first token of
a 128-token prompt through the engine (fast level, bf16, random weights of Qwen3.5-0.8B's shapes, its prompt graph,
PDL), with the down projection split at `ENGINE_SPLIT` and as it is, two engines alternated three times
(`engine_ab`), the first tokens compared.
Result: NVIDIA H100 80GB HBM3, 2026-12-07, two runs. The sweep, at 6dc5c43
(lab/results/prompt_splitk_probe_nvidia-h100-80gb-hbm3_2026-12-07.json; triton 3.6), us: the engine / cuBLAS / the
two-kernel form at its best / the one-kernel form at its best. Down + residual (1,024 x 3,584): 10.66 / 10.14 / 8.95
(SPLIT 4, 64 x 32 x 128 tiles, 256 programs) / 10.07; o_proj / out_proj + residual (1,024 x 2,048): 7.13 / 7.94 /
7.38 (the same tiles) / 8.05; DeltaNet in-projection (8,224 x 1,024): 10.02 / 9.91 / 14.03 (SPLIT 2); attention
in-projection (5,120 x 1,024): 8.30 / 7.00 / 11.17 (SPLIT 2). Every best config within 1.7e-3 of the fp64 product
(bf16 output). The engine, at ee04725, where `linear_residual` took that split itself (the code since removed;
the probe now puts the same split in the slot's place, `split_linear_residual`)
(lab/results/prompt_splitk_probe_nvidia-h100-80gb-hbm3_2026-12-07_engine.json): the down projection at 8.90 us
against 9.70 for cuBLAS in that process. Its time to the first token, 1.847-1.859 ms "split" against 1.852-1.856 ms
"unsplit", measured nothing: `engine_ab` built both engines at `Engine.random`'s default level, "operators", which
runs the projections and the residual adds as separate slots and never calls `linear_residual`, so both ran the same
kernels (it now asks for the fast level).
At the fast level, at 365272b (lab/results/prompt_splitk_probe_nvidia-h100-80gb-hbm3_2026-12-07_engine_fast.json;
the split's call count was added after this run): 1.750, 1.766 and 1.757 ms "split" against 1.765, 1.767 and
1.749 ms "unsplit", the first tokens equal; in that process the engine's down projection alone 10.71 us against
9.66 for cuBLAS.
Verdict: not adopted: the fast level's GEMM + residual keeps its unsplit 64 x 16 tiles below 256 tokens
(`gemm_residual_config`, solutions/layer_fusion.py). The split leads the engine's kernel and `torch.addmm` at the
down projection alone, and the first token comes no sooner with it (why the 1.7 us a call does not show was not
profiled). The in-projections lose with a second kernel and a workspace as wide as their output; o_proj /
out_proj are level. The attention in-projection stays behind cuBLAS at 128 tokens. (Taking a split would also need
the profiler's attribution, `measure.trace.place_kernels`, to place kernels where one slot's calls launch
different kernels by shape: the GPU suite's layer-times test failed on it at ee04725.)
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.triton_helpers import pdl_enter

# the split the engine ran in `engine_ab`: 64 x 32 x 128 tiles, 4 warps, 3 stages, K in 4 pieces, the fastest
# two-kernel config at the down projection; at 65-128 tokens where K >= 3 N (the down projection, not o_proj /
# out_proj at K = 2 N)
ENGINE_SPLIT = (4, 64, 32, 128, 4, 3)

CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)
    (128, 64, 64, 8, 3), (128, 32, 128, 4, 3), (64, 64, 64, 4, 3), (64, 32, 128, 4, 3), (128, 128, 64, 8, 3),
    (64, 16, 256, 4, 3), (32, 32, 128, 4, 3),
]
SPLITS = (2, 4, 8, 16)


@triton.jit
def part_gemm_kernel(x_ptr, w_ptr, part_ptr, M, N, K, K_PER, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PDL: tl.constexpr = False):
    """part[s] = x[:, ks] @ W[:, ks].T over the s-th K_PER columns, fp32; program (m, n, s)."""
    pdl_enter(PDL)
    s = tl.program_id(2)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = common.k_slice_tile(x_ptr, w_ptr, rm, rn, M, N, K, s * K_PER, (s + 1) * K_PER, BLOCK_M, BLOCK_N, BLOCK_K)
    offs = s.to(tl.int64) * M * N + rm[:, None].to(tl.int64) * N + rn[None, :]
    tl.store(part_ptr + offs, acc, mask=(rm < M)[:, None] & (rn < N)[None, :])


@triton.jit
def reduce_residual_kernel(part_ptr, res_ptr, y_ptr, MN, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                           HAS_RES: tl.constexpr = True, PDL: tl.constexpr = False):
    """y = res + part[0] + part[1] + ... in that order (the same bits every run), BLOCK elements a program;
    without HAS_RES the plain product (the in-projection's GEMM)."""
    pdl_enter(PDL)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < MN
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for s in tl.static_range(SPLIT):
        total += tl.load(part_ptr + s * MN + offs, mask=ok, other=0.0)
    if HAS_RES:
        total += tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=ok)


def two_kernel(x, w, res, y, part, split, block_m, block_n, block_k, warps, stages, block=1024, pdl=None):
    """y = res + x @ w.T through `part` [>= split * M * N] fp32 (res None: y = x @ w.T); `pdl`: the engine's
    launch arguments (`runtime.pdl_args`), none by default."""
    pdl = pdl or {}
    M, K = x.shape
    N = w.shape[0]
    k_per = triton.cdiv(triton.cdiv(K, split), block_k) * block_k
    split = triton.cdiv(K, k_per)                       # pieces that hold any column
    part_gemm_kernel[(triton.cdiv(M, block_m), triton.cdiv(N, block_n), split)](
        x, w, part, M, N, K, k_per, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        num_stages=stages, **pdl)
    reduce_residual_kernel[(triton.cdiv(M * N, block),)](part, y if res is None else res, y, M * N, SPLIT=split,
                                                        BLOCK=block, HAS_RES=res is not None, num_warps=4, **pdl)
    return y


def check(device="cpu"):
    """The two-kernel form at odd shapes (M, N, K not multiples of the tiles, pieces that end past K), the
    output poisoned with NaN first, with the engine's launch arguments, and `split_linear_residual` (the engine's
    split: 66 tokens in place, 64 left to the slot's own function), against the fp64 product; returns the largest
    relative error."""
    worst = 0.0
    g = torch.Generator(device="cpu").manual_seed(0)
    for M, N, K, split in ((5, 37, 100, 3), (17, 20, 64, 2), (3, 9, 33, 4)):
        x = torch.randn(M, K, generator=g).to(device)
        w = torch.randn(N, K, generator=g).to(device)
        res = torch.randn(M, N, generator=g).to(device)
        y = torch.full((M, N), float("nan"), device=device)
        part = torch.full((split * M * N,), float("nan"), device=device)
        two_kernel(x, w, res, y, part, split, 16, 16, 16, 4, 1, block=64)
        want = res.double() + x.double() @ w.double().T
        worst = max(worst, common.rel_err(y, want))
    from tritonllm_course.runtime import pdl_args
    x, w, res = (torch.randn(*shape, generator=g).to(device) for shape in ((66, 64), (16, 64), (66, 16)))
    want = res.double() + x.double() @ w.double().T
    y = torch.full_like(res, float("nan"))
    two_kernel(x, w, res, y, torch.full((4 * 66 * 16,), float("nan"), device=device), 4, 16, 16, 16, 4, 1, block=64,
               pdl=pdl_args())
    worst = max(worst, common.rel_err(y, want))
    calls = []
    split = split_linear_residual(lambda *a, **k: calls.append(1), anywhere=True)   # the engine's routing
    stream = res.clone()
    split(x, w, stream, out=stream)
    split(x[:64], w, res[:64].clone())                                             # 64 tokens: not split
    assert calls == [1] and split.splits == 1, "split_linear_residual split a call it should not, or missed one"
    return max(worst, common.rel_err(stream, want))


def main(out):
    common.setup()
    from lab.prefill_probe import gemm_residual_splitk
    from tritonllm_course import kernels
    layer = kernels.load("layer_fusion", "solutions").module
    lin = kernels.load("linear", "solutions").module
    path = common.result_path(out, "prompt_splitk_probe")
    budget = float(os.environ.get("PROBE_S", "150"))
    dev, bf, M = "cuda", torch.bfloat16, 128
    res = common.header(check=check(dev), M=M, cases=[])

    def timed(call, sets):
        try:
            return common.best_time_calls(call, sets)
        except Exception as e:          # a config the compiler refuses: recorded, not fatal
            return common.error_text(e, 160)

    for N, K in ((1024, 2048), (1024, 3584), (8224, 1024), (5120, 1024)):
        plain = N > K                    # the in-projections: no residual; the GEMM + residual's two shapes
        def make(N=N, K=K):
            return {"x": torch.randn(M, K, device=dev).to(bf), "w": (0.02 * torch.randn(N, K, device=dev)).to(bf),
                    "res": None if plain else torch.randn(M, N, device=dev).to(bf),
                    "y": torch.empty(M, N, device=dev, dtype=bf)}
        sets = [make() for _ in range(common.copies_past_l2(N * K * 2))]
        s0 = sets[0]
        want = s0["x"].double() @ s0["w"].double().T + (0 if plain else s0["res"].double())
        part = torch.empty(max(SPLITS) * M * N, device=dev, dtype=torch.float32)
        if plain:
            engine = lambda x, w, res, y: lin.linear(x, w, out=y)
            cublas = lambda x, w, res, y: torch.matmul(x, w.T, out=y)
        else:
            engine = lambda x, w, res, y: layer.linear_residual(x, w, res, out=y)
            cublas = lambda x, w, res, y: torch.addmm(res, x, w.T, out=y)
        case = {"N": N, "K": K, "residual": not plain, "engine_us": timed(engine, sets),
                "cublas_us": timed(cublas, sets), "one_kernel": [], "two_kernel": []}
        res["cases"].append(case)
        shape_t0 = time.time()          # a quarter of the budget a shape
        for split in SPLITS:
            for bm, bn, bk, warps, stages in CONFIGS:
                if time.time() - shape_t0 > budget / 4:
                    break
                c = (split, bm, bn, bk, warps, stages)
                row = {"SPLIT": split, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "warps": warps, "stages": stages,
                       "programs": triton.cdiv(M, bm) * triton.cdiv(N, bn) * split}
                case["two_kernel"].append({**row, "us": timed(
                    lambda x, w, res, y, c=c: two_kernel(x, w, res, y, part, *c), sets)})
                if bm * bn <= 128 * 64 and not plain:
                    case["one_kernel"].append({**row, "us": timed(
                        lambda x, w, res, y, c=c: gemm_residual_splitk(x, w, res, y, *c), sets)})
        for form, fn in (("two_kernel", lambda c: two_kernel(s0["x"], s0["w"], s0["res"], s0["y"], part, *c)),
                         ("one_kernel", lambda c: gemm_residual_splitk(s0["x"], s0["w"], s0["res"], s0["y"], *c))):
            rows = [r for r in case[form] if isinstance(r["us"], float)]
            if rows:
                best = min(rows, key=lambda r: r["us"])
                fn((best["SPLIT"], best["BLOCK_M"], best["BLOCK_N"], best["BLOCK_K"], best["warps"], best["stages"]))
                case[f"{form}_best"] = {**best, "rel_err": common.rel_err(s0["y"], want)}
        print(N, K, "engine", case["engine_us"], "cuBLAS", case["cublas_us"],
              {f: case.get(f"{f}_best") for f in ("two_kernel", "one_kernel")}, flush=True)
        common.save(path, res)
    res["engine"] = engine_ab(int(os.environ.get("AB_ROUNDS", "3")))
    print("engine", res["engine"], flush=True)
    common.save(path, res)
    return res


def split_linear_residual(original, anywhere: bool = False):
    """The fused_linear_residual slot's function with the down projection of 65-128 tokens split
    (`ENGINE_SPLIT`, through one workspace per width kept for the engine's graphs), else `original`; on a GPU
    only, unless `anywhere` (`check`, under the interpreter). Its `splits` counts the calls it split: an A/B whose
    split side never split measured nothing."""
    from tritonllm_course.runtime import pdl_args
    parts = {}

    def linear_residual(x, weight, residual, out=None, scale=None):
        N, K = weight.shape
        M = x.shape[:-1].numel()
        if scale is not None or not 65 <= M <= 128 or K < 3 * N or not (x.is_cuda or anywhere):
            return original(x, weight, residual, out=out, scale=scale)
        out = residual.clone() if out is None else out
        if N not in parts:          # once: a captured graph keeps its address
            parts[N] = torch.empty(ENGINE_SPLIT[0] * 128 * N, device=x.device, dtype=torch.float32)
        linear_residual.splits += 1
        return two_kernel(x.reshape(M, K), weight, residual.view(M, N), out.view(M, N), parts[N], *ENGINE_SPLIT,
                          pdl=pdl_args()).view(out.shape)
    linear_residual.splits = 0
    return linear_residual


def engine_ab(rounds: int) -> dict:
    """The fast level's time to the first token of a 128-token prompt (bf16, random weights of Qwen3.5-0.8B's
    shapes, its prompt graph, PDL where the GPU has it; the level named: `Engine.random`'s default, "operators",
    never calls the GEMM + residual), its fused_linear_residual slot split
    (`split_linear_residual`) and as it is, two engines alternated `rounds` times; ms (`common.ttft_ms`: the median
    of 5) and the first token of each, and `splits`: the down projections the split engine split in its eager
    runs and while capturing its prompt graph (a replay calls no Python), none where the split never ran."""
    import gc
    from tritonllm_course import kernels
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    original = kernels.load("layer_fusion", "solutions").module.linear_residual
    prompt = [(7 * i + 3) % QWEN35_0_8B.vocab_size for i in range(128)]
    split = split_linear_residual(original)
    sources = {"split": {"fused_linear_residual": split}, "unsplit": {}}
    engines = {name: Engine.random(QWEN35_0_8B, dtype=torch.bfloat16, device="cuda", seed=0, max_seq_len=256,
                                   level="fast", sources=src) for name, src in sources.items()}
    out = {name: [] for name in engines}
    for engine in engines.values():
        common.ttft_ms(engine, prompt)                  # its prompt graph captured here
    for _ in range(rounds):
        for name, engine in engines.items():
            out[name].append(common.ttft_ms(engine, prompt))
    engines.clear()
    gc.collect()
    torch.cuda.empty_cache()
    return {**out, "splits": split.splits}


if __name__ == "__main__":
    main(common.out_dir())
