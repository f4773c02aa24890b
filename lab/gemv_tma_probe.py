"""Can a GEMV whose weight tiles stream into shared memory through Hopper's TMA beat chapter 05_projections's at decode?

    python -m lab.gemv_tma_probe [OUTDIR]     (on a Hopper GPU; writes OUTDIR/gemv_tma_<gpu>_<date>.json)
    TMA_S=seconds bounds the sweep (default 300)

Question: lab/gemv_bounds_probe.py found chapter 05_projections's GEMV waiting on its grid, not its bytes: thousands of
small programs, each holding its few KB of weights in registers, so an SM has only ~40 KB in flight and
the weight arrives in two or three rounds, one memory round trip each. Would more bytes in flight per SM,
held in shared memory instead of registers, shorten it?
Method: a fixed grid (1-2 programs per SM) walks its row blocks and K tiles in one flat loop; each tile
[BLOCK_N, BLOCK_K] is one TMA copy (a tensor descriptor: `desc.load`) into shared memory, and the loop is
software-pipelined (`tl.range(num_stages=S)`), so S tiles per program are in flight without holding a
register: up to ~200 KB an SM. Rows past N and columns past K come back as zeros (the descriptor's
bounds). Timed as lab/gemv_bounds_probe.py times (64 launches over distinct copies of the weight in one
CUDA graph, `common.per_launch_us`) beside chapter 05_projections's GEMV in the same run, at the decode shapes, every
config that fits shared memory; each result checked against fp64. The tests run the kernel under the CPU
interpreter (`check`).
Result: NVIDIA H200, 2026-11-30 (lab/results/gemv_tma_nvidia-h200_2026-11-30.json, 150 configs): slower
than chapter 05_projections at every shape, best against it 6.64 vs 5.78 us (8224 x 1024), 6.33 vs 5.45 (7168 x 1024),
5.70 vs 4.55 (5120 x 1024), 5.87 vs 3.72 (1024 x 3584), 4.40 vs 2.92 (1024 x 2048), always with 2
programs an SM and 4 stages (better than 3, and than 6); small tiles stay bound by their per-tile round
trips, large ones did no better.
Verdict: not adopted: chapter 05_projections's `gemv` (solutions/linear.py) stays. More loads in flight did pay off
later in the simpler form of an unrolled walk along K (lab/unrolled_gemv_probe.py).
"""
import os
import time

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from lab import common
from lab.common import LAUNCHES, per_launch_us, weight_copies

SHAPES = [(8224, 1024), (7168, 1024), (5120, 1024), (1024, 3584), (1024, 2048)]   # [N, K]
SMEM = 200 * 1024           # bytes of tiles in flight per SM at most


@triton.jit
def tma_gemv_kernel(x_ptr, w_desc, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    STAGES: tl.constexpr):
    """y = W x (x [K], W [N, K] behind w_desc with block [BLOCK_N, BLOCK_K], y [N]). Program p owns row
    blocks p, p + P, ...; iteration i of its loop is K tile i % KT of its (i // KT)-th block."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    KT = tl.cdiv(K, BLOCK_K)
    total = tl.cdiv(tl.cdiv(N, BLOCK_N) - pid, P) * KT          # the host launches at most one program a block
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for it in tl.range(0, total, num_stages=STAGES):
        j = it // KT
        kc = it - j * KT
        blk = pid + j * P
        w = w_desc.load([blk * BLOCK_N, kc * BLOCK_K]).to(tl.float32)                 # [BLOCK_N, BLOCK_K]
        k = kc * BLOCK_K + cols
        x = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)                  # [BLOCK_K]
        acc += w * x[None, :]
        if kc == KT - 1:                                    # the block's last K tile: its rows are done
            rows = blk * BLOCK_N + tl.arange(0, BLOCK_N)
            tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=rows < N)
            acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)


def tma_gemv(x, w, y, block_n, block_k, stages, programs, warps=4, desc=None):
    """y = w x with `programs` programs (at most one per row block); desc: a prebuilt descriptor of w."""
    N, K = w.shape
    desc = desc or TensorDescriptor.from_tensor(w, [block_n, block_k])
    grid = (max(1, min(programs, triton.cdiv(N, block_n))),)
    tma_gemv_kernel[grid](x, desc, y, N, K, BLOCK_N=block_n, BLOCK_K=block_k, STAGES=stages, num_warps=warps)
    return y


def check(device="cpu"):
    """Odd shapes (K not a multiple of the tile: the descriptor's zero padding), more row blocks than
    programs and fewer, a NaN-poisoned output: the largest relative error against fp64."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for N, K, block_n, block_k, programs in [(37, 80, 8, 32, 3), (5, 48, 4, 32, 8), (64, 16, 16, 16, 1)]:
        x = torch.randn(K, generator=gen).to(device)
        w = torch.randn(N, K, generator=gen).to(device)
        y = torch.full((N,), float("nan"), device=device)
        tma_gemv(x, w, y, block_n, block_k, stages=2, programs=programs, warps=1)
        ref = w.double() @ x.double()
        worst = max(worst, common.rel_err(y, ref))
    return worst


def configs(N, K, sms):
    """Every (programs, BLOCK_N, BLOCK_K, STAGES, warps) whose tiles in flight fit SMEM per SM."""
    out = []
    for per_sm in (1, 2):
        for bn, bk in ((4, 256), (8, 256), (16, 256), (32, 256), (16, 128), (32, 128), (64, 128)):
            if triton.cdiv(N, bn) < sms // 2:
                continue                                    # too few row blocks for the SMs
            for stages in (3, 4, 6):
                if per_sm * stages * bn * bk * 2 > SMEM:
                    continue
                out.append({"programs": per_sm * sms, "BLOCK_N": bn, "BLOCK_K": bk, "STAGES": stages,
                            "num_warps": 8 if bn * bk >= 8192 else 4})
    return out


def main(out):
    common.setup()
    from tritonllm_course import kernels
    from tritonllm_course.measure.benchmark import ceiling_gbps
    lin = kernels.load("linear", "solutions").module
    path = common.result_path(out, "gemv_tma")
    deadline = time.time() + float(os.environ.get("TMA_S", "300"))
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ceiling = ceiling_gbps()
    res = common.header(launches=LAUNCHES, ceiling_GBps=ceiling, check_rel_err=check("cuda"), cases=[])
    for i_shape, (N, K) in enumerate(SHAPES):
        shape_deadline = time.time() + (deadline - time.time()) / (len(SHAPES) - i_shape)   # a fair share
        nbytes = N * K * 2
        ws = weight_copies(N, K)
        w0, copies = ws[0], len(ws)
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        y = torch.empty(N, device="cuda", dtype=torch.bfloat16)
        ref = w0.double() @ x.double()

        def chapter05():
            for i in range(LAUNCHES):
                lin.gemv(x, ws[i % copies], y)
        base = per_launch_us(chapter05)
        case = {"N": N, "K": K, "MB": nbytes / 1e6, "chapter05_us": base,
                "chapter05_pct_of_ceiling": 100 * nbytes / base / 1e3 / ceiling, "rows": []}
        print(case, flush=True)
        for cfg in configs(N, K, sms):
            if time.time() > shape_deadline:
                case["stopped"] = "TMA_S reached"
                break
            row = dict(cfg)
            try:
                descs = [TensorDescriptor.from_tensor(w, [cfg["BLOCK_N"], cfg["BLOCK_K"]]) for w in ws]

                def fn(cfg=cfg, descs=descs):
                    for i in range(LAUNCHES):
                        tma_gemv(x, ws[i % copies], y, cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["STAGES"],
                                 cfg["programs"], cfg["num_warps"], desc=descs[i % copies])
                us = per_launch_us(fn)
                fn()
                row.update(us=us, GBps=nbytes / us / 1e3, pct_of_ceiling=100 * nbytes / us / 1e3 / ceiling,
                           vs_chapter05=base / us, rel_err=common.rel_err(y, ref))
            except Exception as e:          # recorded, not fatal: the next config still runs
                row["error"] = common.error_text(e)
            case["rows"].append(row)
        ok = [r for r in case["rows"] if "us" in r]
        case["best"] = sorted(ok, key=lambda r: r["us"])[:5]
        print({"N": N, "K": K, "chapter05_us": base, "best": case["best"][:2]}, flush=True)
        res["cases"].append(case)
        common.save(path, res)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
