"""What does a decode GEMV's time consist of: HBM bytes, memory latency, or the launch itself?

    python -m lab.gemv_bounds_probe [OUTDIR]     (on a GPU; writes OUTDIR/gemv_bounds_<gpu>_<date>.json)

Question: a decode GEMV of 4-17 MB reaches 35-65% of the bandwidth (chapter 05_projections); the LM head (509 MB) all
of it. Where does the rest of a small GEMV's time go?
Method: chapter 05_projections's GEMV at each decode shape, with its launch config, is cut down step by step, each form
launched 64 times back to back in one CUDA graph (time per launch, `common.per_launch_us`):
  - `hbm`:      the GEMV over distinct copies of the weight (past L2), as in the decode step;
  - `l2`:       the same weight every launch, loaded `evict_first` as chapter 05_projections does (does L2 keep it?);
  - `l2_keep`:  the same weight every launch, loaded `evict_last`: the bytes come from L2 (the weight is
                at most 17 MB of the H200's 50 MB);
  - `x_only`:   the same grid and loop, x loaded, no weight: a program's round trips without the bytes;
  - `store_only`: the same grid, nothing loaded, y stored: launching the grid;
  - `one_program`: one program storing one value: a launch in a graph, nothing else.
The GEMV forms compute the same y (checked against fp64 and bit for bit against chapter 05_projections's).
Result: NVIDIA H200, 2026-11-30 (lab/results/gemv_bounds_nvidia-h200_2026-11-30.json), us a launch; one
program storing one value: 0.76 us.
  shape (programs)     grid, y stored   + x loaded   + weight from L2   from HBM (% of ceiling)
  8224 x 1024 (4112)        3.21            5.12           4.87             5.78 (68%)
  7168 x 1024 (3584)        2.90            4.69           4.46             5.44 (63%)
  5120 x 1024 (2560)        2.29            3.80           3.62             4.51 (55%)
  1024 x 3584 (512)         1.13            2.86           2.78             3.69 (47%)
  1024 x 2048 (512)         1.13            2.32           2.32             2.89 (34%)
From HBM rather than L2 adds 0.6-1.0 us a GEMV (`evict_first` or `evict_last`: the same, L2 keeps the
weight either way); the rest is there without any weight: the launch, scheduling the grid's programs
(2.45 us for 4112 of them: the grid's 3.21 less one program's 0.76) and each program's round trip to
memory for x and back.
Verdict: nothing to adopt (a measurement): it showed that the bytes are not what a decode GEMV waits on,
so the work went to fewer kernels (chapters 21_norm_fusion and 22_layer_fusion's fusions, solutions/*_fusion.py) and to
kernels that keep more loads in flight (lab/gemv_tma_probe.py: not adopted; lab/unrolled_gemv_probe.py: adopted).
"""
import torch
import triton
import triton.language as tl

from lab import common
from lab.common import LAUNCHES, per_launch_us, weight_copies

SHAPES = [(8224, 1024), (7168, 1024), (5120, 1024), (1024, 3584), (1024, 2048)]   # [N, K]
MODES = {"hbm": 0, "l2": 0, "l2_keep": 1, "x_only": 2, "store_only": 3}


@triton.jit
def gemv_form_kernel(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     MODE: tl.constexpr):
    """Chapter 05_projections's GEMV walk, y = W x (x [K], W [N, K], y [N]). MODE 0: weights evict_first (chapter
    05_projections); 1: weights evict_last; 2: no weights (y = sum of x, per row); 3: nothing loaded (y = 0)."""
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
            worst = max(worst, common.rel_err(y, ref))
        y = torch.full((N,), float("nan"), device=device)
        gemv_form(x, w, y, cfg, 2)
        worst = max(worst, ((y.double() - x.double().sum()).abs().max() / x.double().abs().sum()).item())
    return worst


def main(out):
    common.setup()
    from tritonllm_course import kernels
    from tritonllm_course.measure.benchmark import ceiling_gbps
    lin = kernels.load("linear", "solutions").module
    path = common.result_path(out, "gemv_bounds")
    torch.manual_seed(0)
    ceiling = ceiling_gbps()
    res = common.header(launches=LAUNCHES, ceiling_GBps=ceiling, check_rel_err=check("cuda"), rows=[])

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
            common.keep_row(res, path, row)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
