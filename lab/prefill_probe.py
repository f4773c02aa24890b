"""Where does a 128-token prompt's time go, kernel by kernel, and what would shorten it?

    python -m lab.prefill_probe [OUTDIR]     (on a GPU; PROBE_S=seconds bounds it, default 240)
    (scripts/gpu_extras.sh prefill runs it)

Question: the fast level's prefill profile (H200, 2026-11-30) spends its kernel time in the projections
with the residual add (o_proj, out_proj, down: 9 us each at M = 128, N = 1024), the gated MLP GEMM and the
chunked delta rule's first kernel (16 us a layer). Which chunk sizes and tiles would make them faster?
Method: three measurements, each timed as the course times (CUDA graph over enough inputs to pass L2,
bf16, Qwen3.5-0.8B's shapes):
1. the chunked delta rule at T = 128, 512 and 4096 for every chunk size and value block;
2. the GEMM + residual at M = 128, N = 1024: chapter 22_layer_fusion's tiles against other tiles and against a split-K
   version (`gemm_residual_splitk_kernel` below: K cut in SPLIT pieces, every piece's fp32 tile written to
   a workspace, and the last piece of a tile to arrive, counted with an atomic, sums the pieces in a fixed
   order and adds the residual: one launch, bit-identical from run to run);
3. the gated MLP GEMM (gate/up + SwiGLU, no norm) at M = 128 over a few tiles.
Writes OUTDIR/prefill_probe_<gpu>_<date>.json. The tests run the split-K kernel under the CPU interpreter
(`check` below).
Result: NVIDIA H200, 2026-11-30 (lab/results/prefill_probe_nvidia-h200_2026-11-30.json). 1. The three
kernels of the chunked rule together, chunks of 16 / 32 / 64 tokens (value blocks of 16): T = 128
18.2 / 19.0 / 27.1 us, T = 512 42.3 / 34.7 / 36.7 us, T = 4096 301 / 245 / 259 us. 2. The GEMM + residual
at K = 2048 / 3584: chapter 22_layer_fusion's 64 x 32 x 128 tiles 7.8 / 11.4 us, 64 x 16 tiles in steps of 256
7.5 / 10.7 us, split-K (best of 2-8 pieces, 3 both times) 7.7 / 9.7 us, cuBLAS + add 8.0 / 9.5 us.
3. The gated GEMM: chapter 21_norm_fusion's 64 x 64 tiles were the best of seven tilings (9.6 us).
Verdict: adopted: chunks of 16 tokens for prompts up to 128 (`chunk_size_for`, solutions/delta_rule.py, 32 beyond;
since lab/delta_rule_operands_probe.py 64 from 512) and 64 x 16 x 256 tiles for the 1024-row GEMM + residual
(`gemm_residual_config`, solutions/layer_fusion.py), below 256 tokens (from 256 on 128-row tiles:
lab/prompt_gemm_sweep.py). Not adopted: the split-K GEMM, whose workspace and counters bought 1 us at one shape only
(chapter 24_split_k); the gated GEMM's tiles, already the best.
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common


@triton.jit
def gemm_residual_splitk_kernel(x_ptr, w_ptr, res_ptr, y_ptr, part_ptr, count_ptr, M, N, K, K_PER,
                                SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr):
    """y = res + x @ W.T; x [M, K], W [N, K], res and y [M, N] (y may be res). Program (m, n, s) sums
    k in [s * K_PER, (s + 1) * K_PER) of tile (m, n) into part[s, tile]; the tile's last program adds the
    SPLIT parts in order s = 0, 1, ... and the residual, and resets the tile's counter for the next call."""
    pid_m, pid_n, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok, n_ok = rm < M, rn < N
    acc = common.k_slice_tile(x_ptr, w_ptr, rm, rn, M, N, K, s * K_PER, (s + 1) * K_PER, BLOCK_M, BLOCK_N, BLOCK_K,
                              "ieee")
    tile = pid_m * tl.num_programs(1) + pid_n
    inner = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]   # [BLOCK_M, BLOCK_N]
    tile_parts = part_ptr + tile.to(tl.int64) * SPLIT * BLOCK_M * BLOCK_N
    tl.store(tile_parts + s * BLOCK_M * BLOCK_N + inner, acc)
    # acq_rel: this program's part is visible before the count moves; the last one sees every part
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel")
    if arrived == SPLIT - 1:
        total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for j in tl.static_range(SPLIT):                     # a fixed order: the same sum every run
            total += tl.load(tile_parts + j * BLOCK_M * BLOCK_N + inner, cache_modifier=".cg")
        ok = m_ok[:, None] & n_ok[None, :]
        offs = rm[:, None].to(tl.int64) * N + rn[None, :]
        total += tl.load(res_ptr + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=ok)
        tl.atomic_xchg(count_ptr + tile, 0)                  # ready for the next call (a graph replays it)


_WORKSPACES: dict = {}   # (device, kind) -> the current buffer, grown by powers of two
_OUTGROWN: list = []     # the buffers it replaced, never freed: a captured graph keeps their addresses


def _workspace(device, kind, numel, dtype):
    key = (str(device), kind)
    buf = _WORKSPACES.get(key)
    if buf is None or buf.numel() < numel:
        if buf is not None:
            _OUTGROWN.append(buf)
        buf = _WORKSPACES[key] = torch.zeros(triton.next_power_of_2(numel), dtype=dtype, device=device)
    return buf


def gemm_residual_splitk(x, w, res, y, split, block_m, block_n, block_k, warps, stages):
    M, K = x.shape
    N = w.shape[0]
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n), split)
    k_per = triton.cdiv(triton.cdiv(K, split), block_k) * block_k
    tiles = grid[0] * grid[1]
    part = _workspace(x.device, "part", tiles * split * block_m * block_n, torch.float32)
    count = _workspace(x.device, "count", tiles, torch.int32)
    gemm_residual_splitk_kernel[grid](x, w, res, y, part, count, M, N, K, k_per, SPLIT=split, BLOCK_M=block_m,
                                      BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
    return y


def check(device="cpu"):
    """Odd shapes, 1-4 pieces, in place (y = res), twice (the counters reset): the largest relative error
    against fp64, and whether the two calls agreed bit for bit."""
    worst, same = 0.0, True
    gen = torch.Generator().manual_seed(0)
    for M, N, K, split in [(5, 37, 70, 3), (19, 20, 33, 1), (3, 16, 128, 4)]:
        x = torch.randn(M, K, generator=gen).to(device)
        w = torch.randn(N, K, generator=gen).to(device)
        res = torch.randn(M, N, generator=gen).to(device)
        ref = res.double() + x.double() @ w.double().T
        outs = []
        for _ in range(2):
            y = res.clone()
            gemm_residual_splitk(x, w, y, y, split, 16, 16, 16, 1, 1)
            outs.append(y)
        worst = max(worst, common.rel_err(outs[0], ref))
        same = same and torch.equal(outs[0], outs[1])
    return worst, same


def _bench_sets(make, nbytes):
    return [make() for _ in range(common.copies_past_l2(nbytes))]


def main(out):
    common.setup()
    from tritonllm_course import kernels
    fusion = kernels.load("norm_fusion", "solutions").module
    layer = kernels.load("layer_fusion", "solutions").module
    rule = kernels.load("delta_rule", "solutions").module
    path = common.result_path(out, "prefill_probe")
    budget, t0 = float(os.environ.get("PROBE_S", "240")), time.time()
    dev, bf = "cuda", torch.bfloat16
    res = common.header(check=check(dev), delta_rule=[], gemm_residual=[], gated_gemm=[])

    def timed(call, sets):
        try:
            return common.best_time_calls(call, sets)
        except Exception as e:          # a config the compiler refuses: recorded, not fatal
            return common.error_text(e, 160)

    def save():
        common.save(path, res)

    # 1. the chunked delta rule: Qwen3.5-0.8B's 16 heads of 128 x 128
    H, D = 16, 128
    for T in (128, 512, 4096):
        def make(T=T):
            q = torch.nn.functional.normalize(torch.randn(T, H, D, device=dev), dim=-1).to(bf)
            k = torch.nn.functional.normalize(torch.randn(T, H, D, device=dev), dim=-1).to(bf)
            return {"q": q * D ** -0.5, "k": k,
                    "v": torch.randn(T, H, D, device=dev).to(bf),
                    "g": torch.nn.functional.logsigmoid(torch.randn(T, H, device=dev) + 4.0),
                    "beta": torch.rand(T, H, device=dev).to(bf),
                    "s": torch.zeros(H, D, D, device=dev), "o": torch.empty(T, H, D, device=dev, dtype=bf)}
        sets = _bench_sets(make, T * H * D * 8 + H * D * D * 8)
        s0 = sets[0]
        ref = rule.gated_delta_rule_chunked(s0["q"], s0["k"], s0["v"], s0["g"], s0["beta"], s0["s"].clone())[0].float()
        for chunk in (16, 32, 64):
            for bv in (16, 32, 64):
                if time.time() - t0 > budget:
                    break
                call = (lambda q, k, v, g, beta, s, o, c=chunk, b=bv: rule.gated_delta_rule_chunked(
                    q, k, v, g, beta, s, out=o, final_state=s, chunk_size=c, block_v=b))
                us = timed(call, sets)
                o = rule.gated_delta_rule_chunked(s0["q"], s0["k"], s0["v"], s0["g"], s0["beta"],
                                                  torch.zeros_like(s0["s"]), chunk_size=chunk, block_v=bv)[0].float()
                res["delta_rule"].append({"T": T, "chunk": chunk, "block_v": bv, "us": us,
                                          "rel_diff_vs_64": common.rel_err(o, ref)})
                print("delta rule", res["delta_rule"][-1], flush=True)
        save()

    # 2. GEMM + residual at M = 128
    M = 128
    for N, K in ((1024, 2048), (1024, 3584)):
        def make(N=N, K=K):
            return {"x": torch.randn(M, K, device=dev).to(bf), "w": (0.02 * torch.randn(N, K, device=dev)).to(bf),
                    "res": torch.randn(M, N, device=dev).to(bf), "y": torch.empty(M, N, device=dev, dtype=bf)}
        sets = _bench_sets(make, N * K * 2)
        s0 = sets[0]
        ref = s0["res"].float() + s0["x"].float() @ s0["w"].float().T
        base = timed(lambda x, w, res, y: layer.linear_residual(x, w, res, out=y), sets)
        torch_us = timed(lambda x, w, res, y: torch.add(res, x @ w.T, out=y), sets)
        case = {"M": M, "N": N, "K": K, "chapter21_us": base, "torch_us": torch_us, "tiles": [], "splitk": []}
        res["gemm_residual"].append(case)
        for bm, bn, bk, warps, stages in [(64, 32, 128, 4, 5), (32, 32, 128, 4, 4), (64, 64, 64, 4, 4),
                                          (128, 32, 64, 4, 4), (32, 64, 128, 4, 4), (64, 16, 256, 4, 3),
                                          (16, 32, 256, 4, 3), (32, 16, 256, 4, 3)]:
            if time.time() - t0 > 2 * budget:
                break
            grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
            call = (lambda x, w, res, y, c=(bm, bn, bk, warps, stages), g=grid: layer.gemm_residual_kernel[g](
                x, w, res, y, M, N, K, BLOCK_M=c[0], BLOCK_N=c[1], BLOCK_K=c[2], num_warps=c[3], num_stages=c[4]))
            case["tiles"].append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "warps": warps, "stages": stages,
                                  "programs": grid[0] * grid[1], "us": timed(call, sets)})
            print("gemm+residual", N, K, case["tiles"][-1], flush=True)
        for split in (2, 3, 4, 6, 8):
            for bm, bn, bk, warps, stages in [(64, 64, 64, 4, 3), (64, 32, 128, 4, 3), (128, 64, 64, 8, 3),
                                              (32, 64, 128, 4, 3), (64, 128, 64, 8, 3)]:
                if time.time() - t0 > 2 * budget:
                    break
                call = (lambda x, w, res, y, c=(split, bm, bn, bk, warps, stages):
                        gemm_residual_splitk(x, w, res, y, *c))
                us = timed(call, sets)
                y = s0["res"].clone()
                gemm_residual_splitk(s0["x"], s0["w"], y, y, split, bm, bn, bk, warps, stages)
                programs = triton.cdiv(M, bm) * triton.cdiv(N, bn) * split
                case["splitk"].append({"SPLIT": split, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "warps": warps,
                                       "stages": stages, "programs": programs, "us": us,
                                       "rel_err": common.rel_err(y, ref)})
                print("split-K", N, K, case["splitk"][-1], flush=True)
        print(f"gemm+residual {N} x {K}: chapter 22_layer_fusion {base} us, torch {torch_us} us", flush=True)
        save()

    # 3. gate/up + SwiGLU at M = 128 (no norm)
    I, K = 3584, 1024
    def make():
        return {"x": torch.randn(M, K, device=dev).to(bf), "w": (0.02 * torch.randn(2 * I, K, device=dev)).to(bf),
                "y": torch.empty(M, I, device=dev, dtype=bf)}
    sets = _bench_sets(make, 2 * I * K * 2)
    base = timed(lambda x, w, y: fusion.gate_up_swiglu_merged(x, w, out=y), sets)
    case = {"M": M, "I": I, "K": K, "chapter21_us": base, "tiles": []}
    res["gated_gemm"].append(case)
    for bm, bn, bk, warps, stages in [(64, 64, 64, 4, 4), (128, 64, 64, 8, 3), (128, 32, 64, 4, 4),
                                      (64, 32, 128, 4, 4), (128, 64, 32, 8, 4), (64, 128, 64, 8, 3),
                                      (128, 128, 64, 8, 3)]:
        if time.time() - t0 > 2.5 * budget:
            break
        grid = (triton.cdiv(M, bm), triton.cdiv(I, bn))

        def call(x, w, y, c=(bm, bn, bk, warps, stages), g=grid):
            gw, uw = w.chunk(2, dim=0)
            fusion.fused_gemm_kernel[g](x, gw, gw, uw, y, M, I, K, 1e-6, HAS_NORM=False, GATED=True,
                                        BLOCK_M=c[0], BLOCK_N=c[1], BLOCK_K=c[2], num_warps=c[3], num_stages=c[4])
        case["tiles"].append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "warps": warps, "stages": stages,
                              "programs": grid[0] * grid[1], "us": timed(call, sets)})
        print("gated gemm", case["tiles"][-1], flush=True)
    save()
    print(f"written to {path}")


if __name__ == "__main__":
    main(common.out_dir())
