"""Can the next projection's weights stream into L2 while this one runs, so HBM never idles between kernels?

    python -m lab.l2_prefetch_probe [OUTDIR]   (on a Hopper GPU; writes OUTDIR/l2_prefetch_<gpu>_<date>.json)

Question: a decode GEMV of a few MB reaches 55-65% of the bandwidth: HBM idles while a kernel ramps up (the
first loads' latency), while its last programs finish, and between two kernels. Hopper can ask L2 to fetch
a range of memory without holding a register or waiting for it (`cp.async.bulk.prefetch.L2`, fire and
forget: the kernel may exit while the bytes are still on their way). If each projection's kernel asks for
the next projection's weights as it starts, do the bytes keep flowing across the kernel boundary, and
does the next kernel read them from L2?
Method: a chain that has one DeltaNet layer's decode projections (in-projection 8224 x 1024, out
2048 -> 1024, gate/up 7168 x 1024, down 3584 -> 1024), LAYERS distinct copies so the chain passes L2, in
one CUDA graph, bf16:
  - `chapter05`: chapter 05_projections's GEMV, nothing else;
  - `in-kernel d=D`: the same GEMV, each program first asks L2 for its share of the weights D ops ahead;
  - `in-kernel d=D,f=F`: only the first fraction F of them (what the next kernel's first waves read);
  - `side xP`: a P-program prefetch kernel for op i+1 on a second stream, forked as op i starts;
  - `resident`: one layer's weights (43 MB, inside L2) over and over: what a perfect prefetch could reach.
Each variant's outputs are compared bit for bit with chapter 05_projections's (a prefetch changes no arithmetic).
The tests run the prefetching GEMV under the CPU interpreter with the prefetch compiled out (`check`).
Result: NVIDIA H200, 2026-11-30 (lab/results/l2_prefetch_nvidia-h200_2026-11-30.json, 8 layers): slower
everywhere, the outputs bit-identical. Chapter 05_projections's chain 18.2 us a layer (56% of the ceiling); with the
whole next weight 35.7 us, its first quarter 29.9, two projections ahead 36.6, from a second stream
25.2 (132 programs) and 29.6 (16). `resident` took 18.2 us too, but 43 MB read `evict_first` do not stay
in a 50 MB L2, so that row says little (lab/gemv_bounds_probe.py measures L2 against HBM properly).
Verdict: not adopted: the decode GEMVs (chapter 05_projections's `gemv`, solutions/linear.py, and the fused ones)
prefetch nothing: every variant was 1.4-2x slower, and what a GEMV waits on is not its bytes from HBM
(lab/gemv_bounds_probe.py: from HBM rather than L2 adds only 0.6-1.0 us).
"""
import os

import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course import kernels
from tritonllm_course.engine.graph import capture

gemv_rows = kernels.load("linear", "solutions").module.gemv_rows      # chapter 05_projections's walk along a row

LAYER = [(8224, 1024), (1024, 2048), (7168, 1024), (1024, 3584)]   # [N, K] of each decode projection
LAYERS = int(os.environ.get("LAYERS", "8"))                           # 8 x 43 MB: well past L2's 50 MB


@triton.jit
def prefetch_l2(addr, nbytes):
    """Ask L2 for bytes [addr, addr + nbytes) of global memory, elementwise; nbytes <= 0 asks for nothing.
    addr 16-byte aligned, nbytes a multiple of 16. Hopper (sm_90) and later; returns zeros."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s64 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $3; mov.u32 $0, 0; }",
        "=r,l,l,r", [addr, nbytes, nbytes.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_share(base, total, share, part, THREADS: tl.constexpr):
    """Prefetch part `part` (of size `share` bytes) of [base, base + total): one bulk request a thread."""
    piece = tl.cdiv(tl.cdiv(share, THREADS), 16) * 16                                  # bytes per thread
    start = part.to(tl.int64) * share + tl.arange(0, THREADS).to(tl.int64) * piece      # [THREADS]
    n = tl.minimum(tl.minimum(piece, share - tl.arange(0, THREADS).to(tl.int64) * piece), total - start)
    return prefetch_l2(base + start, n)


@triton.jit
def gemv_prefetch_kernel(x_ptr, w_ptr, y_ptr, N, K, pf_base, pf_bytes, pf_share,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PREFETCH: tl.constexpr,
                         THREADS: tl.constexpr):
    """Chapter 05_projections's GEMV (y = W x; x [K], W [N, K], y [N]) that first asks L2 for its share of another
    weight (pf_bytes at address pf_base, pf_share bytes per program)."""
    pid = tl.program_id(0)
    if PREFETCH:
        done = prefetch_share(pf_base, pf_bytes, pf_share, pid, THREADS)
        tl.store(y_ptr + tl.arange(0, THREADS) * 0, done.to(y_ptr.dtype.element_ty), mask=done != 0)  # never
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    y = gemv_rows(x_ptr, w_ptr, rows, N, K, 0, K, BLOCK_N, BLOCK_K)                     # chapter 05_projections's walk
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def prefetch_kernel(base, total, share, sink_ptr, THREADS: tl.constexpr):
    """Ask L2 for [base, base + total), `share` bytes per program (sink_ptr: never written)."""
    done = prefetch_share(base, total, share, tl.program_id(0), THREADS)
    tl.store(sink_ptr + tl.arange(0, THREADS) * 0, done, mask=done != 0)


def gemv_prefetch(x, w, y, cfg, nxt=None, fraction=1.0, interpreted=False):
    """y = w x with chapter 05_projections's launch config `cfg`; with `nxt` (a weight), ask L2 for the first `fraction`
    of it first."""
    N, K = w.shape
    grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
    threads = 32 * cfg["num_warps"]
    total = int(nxt.numel() * nxt.element_size() * fraction) // 16 * 16 if nxt is not None else 0
    share = triton.cdiv(triton.cdiv(total, grid[0]), 16) * 16
    gemv_prefetch_kernel[grid](x, w, y, N, K, nxt.data_ptr() if nxt is not None else 0, total, share,
                               BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                               PREFETCH=nxt is not None and not interpreted, THREADS=threads,
                               num_warps=cfg["num_warps"])
    return y


_SINK = {}


def prefetch(w, programs):
    """Ask L2 for all of w, from `programs` programs of 128 threads."""
    total = w.numel() * w.element_size()
    sink = _SINK.setdefault(w.device, torch.zeros(1, dtype=torch.int32, device=w.device))
    prefetch_kernel[(programs,)](w.data_ptr(), total, triton.cdiv(triton.cdiv(total, programs), 16) * 16, sink,
                                 THREADS=128, num_warps=4)


def check(device="cpu"):
    """Odd shapes, a NaN-poisoned output, the prefetch compiled out (the interpreter has no inline PTX):
    the largest relative error against fp64."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for N, K, block_n, block_k in [(37, 70, 4, 32), (5, 33, 2, 64)]:
        x = torch.randn(K, generator=gen).to(device)
        w = torch.randn(N, K, generator=gen).to(device)
        y = torch.full((N,), float("nan"), device=device)
        gemv_prefetch(x, w, y, {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": 1}, nxt=w,
                      interpreted=device == "cpu")
        ref = w.double() @ x.double()
        worst = max(worst, common.rel_err(y, ref))
    return worst


def main(out):
    common.setup()
    from tritonllm_course import kernels
    from tritonllm_course.measure.benchmark import _median_event_time, ceiling_gbps
    lin = kernels.load("linear", "solutions").module
    path = common.result_path(out, "l2_prefetch")
    torch.manual_seed(0)
    ops = [{"x": torch.randn(K, device="cuda", dtype=torch.bfloat16),
            "w": 0.02 * torch.randn(N, K, device="cuda", dtype=torch.bfloat16),
            "y": torch.empty(N, device="cuda", dtype=torch.bfloat16)} for _ in range(LAYERS) for N, K in LAYER]
    nbytes = sum(o["w"].numel() * 2 for o in ops)
    ceiling = ceiling_gbps()
    side = torch.cuda.Stream()

    resident = [ops[j % len(LAYER)] for j in range(len(ops))]   # one layer's weights (43 MB) over and over

    def chain(variant):
        """Every op of the chain, launched as `variant` says."""
        name, _, arg = variant.partition(" ")
        for i, o in enumerate(resident if name == "resident" else ops):
            cfg = lin.gemv_config(*o["w"].shape)
            if name in ("chapter05", "resident"):
                lin.gemv(o["x"], o["w"], o["y"])
            elif name == "in-kernel":          # arg "d=D[,f=F]": the weights D ops ahead, the first F of them
                opts = dict(kv.split("=") for kv in arg.split(","))
                gemv_prefetch(o["x"], o["w"], o["y"], cfg, nxt=ops[(i + int(opts["d"])) % len(ops)]["w"],
                              fraction=float(opts.get("f", 1)))
            elif name == "side":               # arg "xP": a P-program prefetch of op i + 1 beside op i
                ev = torch.cuda.Event()
                ev.record()
                side.wait_event(ev)
                with torch.cuda.stream(side):
                    prefetch(ops[(i + 1) % len(ops)]["w"], int(arg[1:]))
                lin.gemv(o["x"], o["w"], o["y"])
        if name == "side":
            torch.cuda.current_stream().wait_stream(side)

    res = common.header(layers=LAYERS, layer=LAYER, bytes=nbytes, ceiling_GBps=ceiling, check_rel_err=check("cuda"),
                        rows=[])
    reference = None
    for variant in ["chapter05", "resident", "in-kernel d=1", "in-kernel d=1,f=0.25", "in-kernel d=2",
                    "side x16", "side x132", "chapter05"]:
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for o in ops:
                    o["y"].fill_(float("nan"))
                chain(variant)                      # compile outside the capture
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            ys = torch.cat([o["y"] for o in ops]).clone()
            if reference is None:
                reference = ys
            same = bool(torch.equal(ys, reference)) if variant != "resident" else None
            graph = torch.cuda.CUDAGraph()
            capture(graph, lambda: chain(variant))
            graph.replay()
            us = min(_median_event_time(graph.replay, 30) for _ in range(3)) * 1e3
            row = {"variant": variant, "us_per_layer": us / LAYERS, "GBps": nbytes / us / 1e3,
                   "pct_of_ceiling": 100 * nbytes / us / 1e3 / ceiling, "bit_identical": same}
        except Exception as e:                       # recorded, not fatal: the next variant still runs
            row = {"variant": variant, "error": common.error_text(e)}
        common.keep_row(res, path, row)


if __name__ == "__main__":
    main(common.out_dir())
