"""Can a persistent, software-pipelined GEMV beat chapter 05_projections's one-program-per-row-block GEMV at decode?

    python -m lab.gemv_persistent_probe [OUTDIR]    (on a GPU; PROBE_S=seconds bounds it, default 240)
    (scripts/gpu_extras.sh gemv runs it with the config sweep)

Question: chapter 05_projections's GEMV launches one program per 2 rows: 2,560 to 4,112 programs for the layer
projections, about 1.2 to 2 waves of the GPU, each program one round trip to memory. Would a fixed grid
that keeps the next blocks' weights in flight do better?
Method: a fixed grid (P programs per SM) walks the row blocks, whole rows in one tile (BLOCK_K >= K), x
loaded once per program; the walk is a flat loop that Triton can software-pipeline (`tl.range(...,
num_stages=STAGES)`): the next blocks' weights are in flight while this block is reduced. 1-8 rows a
block, 16 or 32 elements a thread, 1-4 stages, 1-8 programs per SM, timed as the course times (a CUDA
graph over enough weights to pass L2, bf16) beside chapter 05_projections's GEMV on the same inputs. Writes
OUTDIR/gemv_persistent_<gpu>_<date>.json. The tests run the kernel under the CPU interpreter (`check`).
Result: NVIDIA H200, 2026-11-30 (lab/results/gemv_persistent_nvidia-h200_2026-11-30.json, 80-128 configs
a shape): slower than chapter 05_projections's GEMV at every decode shape, best config against it 4.75 vs 4.42 us
(5120 x 1024), 6.34 vs 6.09 us (8224 x 1024), 5.82 vs 5.50 us (7168 x 1024), 3.16 vs 2.90 us
(1024 x 2048), 4.02 vs 3.73 us (1024 x 3584), 118 vs 114 us (LM head). The best grids were the largest
(8 programs an SM at most shapes; one row a block at the three K = 1,024 layer shapes, two at the others): the
closer to chapter 05_projections's many small programs, the faster.
Verdict: not adopted: slower at every shape, so chapter 05_projections's `gemv` (solutions/linear.py) and its
`gemv_config` stay as they are.
"""
import os
import time

import torch
import triton
import triton.language as tl

from lab import common


@triton.jit
def persistent_gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           STAGES: tl.constexpr):
    """y[n] = sum_k W[n, k] x[k]; x [K], W [N, K], y [N]; BLOCK_K >= K (a whole row per tile)."""
    cols = tl.arange(0, BLOCK_K)
    k_ok = cols < K
    x = tl.load(x_ptr + cols, mask=k_ok, other=0.0).to(tl.float32)                  # [BLOCK_K], once
    for blk in tl.range(tl.program_id(0), tl.cdiv(N, BLOCK_N), tl.num_programs(0), num_stages=STAGES):
        rows = blk * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < N
        w = tl.load(w_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], mask=row_ok[:, None] & k_ok[None, :],
                    other=0.0, eviction_policy="evict_first").to(tl.float32)        # [BLOCK_N, BLOCK_K]
        tl.store(y_ptr + rows, tl.sum(w * x[None, :], axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)


def persistent_gemv(x, w, y, block_n, warps, stages, programs):
    """Launch on x [K], w [N, K], y [N] with `programs` programs (at most one per row block)."""
    N, K = w.shape
    grid = (max(1, min(programs, triton.cdiv(N, block_n))),)
    persistent_gemv_kernel[grid](x, w, y, N, K, BLOCK_N=block_n, BLOCK_K=max(16, triton.next_power_of_2(K)),
                                 STAGES=stages, num_warps=warps)
    return y


def check(device="cpu"):
    """Odd shapes, fewer programs than row blocks (the walk) and more (the clamp), a NaN-poisoned output:
    the largest relative error against fp64."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for N, K, block_n, programs in [(37, 70, 4, 3), (5, 33, 2, 8), (64, 16, 8, 1)]:
        x = torch.randn(K, generator=gen).to(device)
        w = torch.randn(N, K, generator=gen).to(device)
        y = torch.full((N,), float("nan"), device=device)
        persistent_gemv(x, w, y, block_n, warps=1, stages=2, programs=programs)
        ref = w.double() @ x.double()
        worst = max(worst, common.rel_err(y, ref))
    return worst


CASES = [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 2048), (1024, 3584), (248320, 1024)]


def main(out):
    common.setup()
    from tritonllm_course import kernels
    lin = kernels.load("linear", "solutions").module
    path = common.result_path(out, "gemv_persistent")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    budget, t0 = float(os.environ.get("PROBE_S", "240")), time.time()
    res = common.header(sms=sms, check_rel_err=check("cuda"), cases=[])
    for N, K in CASES:
        copies = common.copies_past_l2(N * K * 2)
        sets = [{"x": torch.randn(K, device="cuda", dtype=torch.bfloat16),
                 "w": 0.02 * torch.randn(N, K, device="cuda", dtype=torch.bfloat16),
                 "y": torch.empty(N, device="cuda", dtype=torch.bfloat16)} for _ in range(copies)]
        ref = (sets[0]["w"].float() @ sets[0]["x"].float())
        hand = common.best_time_calls(lambda x, w, y: lin.gemv(x, w, y), sets)
        rows = []
        bk = max(16, triton.next_power_of_2(K))
        for block_n in (1, 2, 4, 8):
            for per_thread in (16, 32):
                warps = block_n * bk // (32 * per_thread)
                if not 1 <= warps <= 16:
                    continue
                for stages in (1, 2, 3, 4):
                    for per_sm in (1, 2, 4, 8):
                        if time.time() - t0 > budget:
                            break
                        cfg = {"BLOCK_N": block_n, "num_warps": warps, "STAGES": stages, "programs": per_sm * sms}
                        try:
                            call = (lambda x, w, y, c=cfg: persistent_gemv(x, w, y, c["BLOCK_N"], c["num_warps"],
                                                                             c["STAGES"], c["programs"]))
                            s0 = sets[0]
                            call(**s0)
                            err = common.rel_err(s0["y"], ref)
                            us = common.best_time_calls(call, sets)
                            rows.append({**cfg, "us": us, "GBps": N * K * 2 / us / 1e3, "rel_err": err})
                        except Exception as e:       # a config the compiler refuses: recorded, not fatal
                            rows.append({**cfg, "error": common.error_text(e, 120)})
        best = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
        res["cases"].append({"N": N, "K": K, "chapter05_us": hand, "chapter05_GBps": N * K * 2 / hand / 1e3,
                             "best": best[:6], "all": rows})
        print(f"{N} x {K}: 05_projections {hand:.2f} us; best persistent {best[0] if best else None}", flush=True)
        common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
