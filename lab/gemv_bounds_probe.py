"""What does a decode GEMV's time consist of: HBM bytes, memory latency, or the launch itself?

    python scripts/gemv_bounds_probe.py OUTDIR     (on a GPU; writes OUTDIR/gemv_bounds_<gpu>_<date>.json)

A decode GEMV of 4-17 MB reaches 35-65% of the bandwidth (chapter 05); the LM head (509 MB) all of it.
Here chapter 05's GEMV at each decode shape, with its launch config, is cut down step by step, each form
launched 64 times back to back in one CUDA graph (time per launch):
  - `hbm`:      the GEMV over distinct copies of the weight (past L2), as in the decode step;
  - `l2`:       the same weight every launch, loaded `evict_first` as chapter 05 does (does L2 keep it?);
  - `l2_keep`:  the same weight every launch, loaded `evict_last`: the bytes come from L2 (the weight is
                at most 17 MB of the H200's 50 MB);
  - `x_only`:   the same grid and loop, x loaded, no weight: a program's round trips without the bytes;
  - `store_only`: the same grid, nothing loaded, y stored: launching the grid;
  - `one_program`: one program storing one value: a launch in a graph, nothing else.
The GEMV forms compute the same y (checked against fp64 and bit for bit against chapter 05's).

Measured on an H200 (2026-11-30, results/gemv_bounds_nvidia-h200_2026-11-30.json): from HBM rather than
L2 adds 0.6-0.9 us a GEMV; the grid alone (launched, y stored) takes 1.1-3.2 us, x loaded and summed
2.3-5.1: most of a decode GEMV's time is there without any weight.
"""
import json
import sys
import time

import torch
import triton
import triton.language as tl

SHAPES = [(8224, 1024), (7168, 1024), (5120, 1024), (1024, 3584), (1024, 2048)]   # [N, K]
MODES = {"hbm": 0, "l2": 0, "l2_keep": 1, "x_only": 2, "store_only": 3}
LAUNCHES = 64


@triton.jit
def gemv_form_kernel(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     MODE: tl.constexpr):
    """Chapter 05's GEMV walk, y = W x (x [K], W [N, K], y [N]). MODE 0: weights evict_first (chapter 05);
    1: weights evict_last; 2: no weights (y = sum of x, per row); 3: nothing loaded (y = 0)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    if MODE == 3:
        tl.store(y_ptr + rows, tl.zeros([BLOCK_N], dtype=tl.float32).to(y_ptr.dtype.element_ty), mask=row_ok)
    else:
        row_start = w_ptr + rows.to(tl.int64) * K
        cols = tl.arange(0, BLOCK_K)
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + cols
            k_ok = k < K
            x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)                    # [BLOCK_K]
            m = row_ok[:, None] & k_ok[None, :]
            if MODE == 0:
                w = tl.load(row_start[:, None] + k[None, :], mask=m, other=0.0,
                            eviction_policy="evict_first").to(tl.float32)                   # [BLOCK_N, BLOCK_K]
                acc += w * x[None, :]
            elif MODE == 1:
                w = tl.load(row_start[:, None] + k[None, :], mask=m, other=0.0,
                            eviction_policy="evict_last").to(tl.float32)
                acc += w * x[None, :]
            else:
                acc += tl.where(m, x[None, :], 0.0)
        tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)


def gemv_form(x, w, y, cfg, mode):
    N, K = w.shape
    grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
    gemv_form_kernel[grid](x, w, y, N, K, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], MODE=mode,
                           num_warps=cfg["num_warps"])
    return y


def check(device="cpu"):
    """Odd shapes, a NaN-poisoned output: the two GEMV forms against fp64 (largest relative error), and the
    x-only form's row sums exactly."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for N, K, block_n, block_k in [(37, 70, 4, 32), (5, 33, 2, 64)]:
        x = torch.randn(K, generator=gen).to(device)
        w = torch.randn(N, K, generator=gen).to(device)
        cfg = {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": 1}
        ref = w.double() @ x.double()
        for mode in (0, 1):
            y = torch.full((N,), float("nan"), device=device)
            gemv_form(x, w, y, cfg, mode)
            worst = max(worst, ((y.double() - ref).norm() / ref.norm()).item())
        y = torch.full((N,), float("nan"), device=device)
        gemv_form(x, w, y, cfg, 2)
        worst = max(worst, ((y.double() - x.double().sum()).abs().max() / x.double().abs().sum()).item())
    return worst


def weight_copies(rows: int, K: int) -> list:
    """Copies of one random bf16 [rows, K] weight (the same values, distinct memory), enough of them to
    pass L2 many times over when launches cycle through them (at least 256 MB in all)."""
    w0 = 0.02 * torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    return [w0] + [w0.clone() for _ in range(max(1, triton.cdiv(256 * 2**20, rows * K * 2) - 1))]


def per_launch_us(fn):
    """us per launch of fn() (LAUNCHES launches) replayed from a CUDA graph: the best of three medians."""
    from tritonllm_course.benchmark import _median_event_time
    fn()                                            # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    return min(_median_event_time(graph.replay, 20) for _ in range(3)) * 1e3 / LAUNCHES


def main(out):
    import tritonllm_course
    tritonllm_course.setup(quiet=True)
    from tritonllm_course import kernels
    from tritonllm_course.benchmark import ceiling_gbps, results_stem
    lin = kernels.load("linear", "solutions").module
    path = results_stem(out, "gemv_bounds")[0].with_suffix(".json")
    torch.manual_seed(0)
    ceiling = ceiling_gbps()
    res = {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "launches": LAUNCHES,
           "ceiling_GBps": ceiling, "check_rel_err": check("cuda"), "rows": []}

    one = torch.zeros(1, device="cuda", dtype=torch.bfloat16)
    def one_program():
        for _ in range(LAUNCHES):
            gemv_form(one, one.view(1, 1), one, {"BLOCK_N": 1, "BLOCK_K": 16, "num_warps": 1}, 3)
    us = per_launch_us(one_program)
    res["rows"].append({"form": "one_program", "us": us})
    print(res["rows"][-1], flush=True)
    for N, K in SHAPES:
        nbytes = N * K * 2
        ws = weight_copies(N, K)
        copies = len(ws)
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(N, device="cuda", dtype=torch.bfloat16)
        cfg = lin.gemv_config(N, K)
        want = lin.gemv(x, ws[0], torch.empty_like(y)).clone()
        for form, mode in [("chapter05", None), *MODES.items()]:
            def fn(form=form, mode=mode):
                for i in range(LAUNCHES):
                    w = ws[i % copies] if form in ("hbm", "chapter05") else ws[0]
                    if mode is None:
                        lin.gemv(x, w, y)
                    else:
                        gemv_form(x, w, y, cfg, mode)
            us = per_launch_us(fn)
            row = {"N": N, "K": K, "MB": nbytes / 1e6, "programs": triton.cdiv(N, cfg["BLOCK_N"]), **cfg,
                   "form": form, "us": us}
            if form in ("chapter05", "hbm", "l2", "l2_keep"):
                fn()                                # the last launch read ws[0] or a copy of it
                row.update(GBps=nbytes / us / 1e3, pct_of_ceiling=100 * nbytes / us / 1e3 / ceiling,
                           bit_identical_to_chapter05=bool(torch.equal(y, want)))
            res["rows"].append(row)
            print(row, flush=True)
            path.write_text(json.dumps(res, indent=1))
    path.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
