"""Can a persistent, software-pipelined GEMV beat chapter 05's one-program-per-row-block GEMV at decode?

    python scripts/gemv_persistent_probe.py OUTDIR     (on a GPU; PROBE_S=seconds bounds it, default 240)
    (scripts/gpu_extra_gemv.sh runs it with the config sweep)

Chapter 05's GEMV launches one program per 2 rows: 2,560 to 4,112 programs for the layer projections,
about 1.2 to 2 waves of the GPU, each program one round trip to memory. Here a fixed grid (P programs per
SM) walks the row blocks, whole rows in one tile (BLOCK_K >= K), x loaded once per program; the walk is a
flat loop that Triton can software-pipeline (`tl.range(..., num_stages=STAGES)`): the next blocks'
weights are in flight while this block is reduced. Timed as the course times (a CUDA graph over enough
weights to pass L2) beside chapter 05's GEMV on the same inputs. Writes
OUTDIR/gemv_persistent_<gpu>_<date>.json.
The tests run the kernel under the CPU interpreter (`check` below).
"""
import json
import os
import sys
import time

import torch
import triton
import triton.language as tl


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
        worst = max(worst, ((y.double() - ref).norm() / ref.norm()).item())
    return worst


CASES = [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 2048), (1024, 3584), (248320, 1024)]


def main(out):
    import tritonllm_course
    tritonllm_course.setup(quiet=True)
    from tritonllm_course import kernels
    from tritonllm_course.benchmark import results_stem, time_calls
    lin = kernels.load("linear", "solutions").module
    path = results_stem(out, "gemv_persistent")[0].with_suffix(".json")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    budget, t0 = float(os.environ.get("PROBE_S", "240")), time.time()
    res = {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "sms": sms,
           "check_rel_err": check("cuda"), "cases": []}
    for N, K in CASES:
        copies = max(2, min(64, (256 << 20) // (N * K * 2)))
        sets = [{"x": torch.randn(K, device="cuda", dtype=torch.bfloat16),
                 "w": 0.02 * torch.randn(N, K, device="cuda", dtype=torch.bfloat16),
                 "y": torch.empty(N, device="cuda", dtype=torch.bfloat16)} for _ in range(copies)]
        ref = (sets[0]["w"].float() @ sets[0]["x"].float())
        hand = min(time_calls(lambda x, w, y: lin.gemv(x, w, y), sets) for _ in range(2))
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
                            err = ((s0["y"].float() - ref).norm() / ref.norm()).item()
                            us = min(time_calls(call, sets) for _ in range(2))
                            rows.append({**cfg, "us": us, "GBps": N * K * 2 / us / 1e3, "rel_err": err})
                        except Exception as e:       # a config the compiler refuses: recorded, not fatal
                            rows.append({**cfg, "error": f"{type(e).__name__}: {e}"[:120]})
        best = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
        res["cases"].append({"N": N, "K": K, "chapter05_us": hand, "chapter05_GBps": N * K * 2 / hand / 1e3,
                             "best": best[:6], "all": rows})
        print(f"{N} x {K}: chapter 05 {hand:.2f} us; best persistent {best[0] if best else None}", flush=True)
        path.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
