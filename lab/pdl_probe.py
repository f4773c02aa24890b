"""Does programmatic dependent launch (PDL) shorten a chain of decode GEMVs replayed from a CUDA graph?

    python -m lab.pdl_probe [OUTDIR]      (on a GPU; writes OUTDIR/pdl_probe_<gpu>_<date>.json)

Question: with PDL (`launch_pdl=True`, `gdc_launch_dependents` / `gdc_wait` in the kernel) a kernel may
start while the one before it drains, and load its weights (which no kernel writes) before waiting for its
input. Does that hide the gaps and ramps between the decode step's GEMVs?
Method: the chain is the decode step's 97 GEMV shapes (24 layers of in-projection, out-projection,
gate/up, down, and the LM head), each reading the previous one's output, in one CUDA graph; the same
GEMV as chapter 05_projections, the PDL variants a constexpr MODE: 0 plain, 1 wait at the top, 2 first weight tile
loaded before the wait, 3 and 4 as 1 and 2 with the next kernel let launch only after this one's store,
5 as 2 with no early trigger, 9 mode 2 for the one-wave GEMVs and 5 for the others. The chain runs
modes 0, 1, 2, 3, 4, 9 and 0 again (`mode0_again`); then four of its shapes alone in modes 0, 2 and 4,
100 launches in a graph.
Result: NVIDIA H200, 2026-11-30 (lab/results/pdl_probe_nvidia-h200_2026-11-30.json: modes 0-2;
lab/results/pdl_probe_nvidia-h200_2026-11-30_placements.json: modes 3 and 4, mode 9 from a second run).
No mode gains on the chain: mode 0 499-520 us over the runs, mode 1 513-514, 2 506-507, 3 and 4 559, 9
570. (Both files hold mode 0's last pass only: the probe wrote its two passes under one key then; the
first run's first pass, 502 us, is not in them.) Alone, a one-wave GEMV gains from mode 2 (1024 x 2048:
2.31 -> 1.67 us; 1024 x 3584: 2.88 -> 2.55) and a wide one loses (7168 x 1024: 4.32 -> 4.93 us;
6144 x 1024: 3.87 -> 4.03): the next kernel's programs, launched early, take the SM slots of its second
wave.
Verdict: not adopted in this form: on the whole chain the one-wave GEMVs' gain is lost to the wide ones.
Superseded by lab/pdl_chain_probe.py: with every weight load before the wait (a whole tile a program)
PDL does pay, and the engine adopts it there.
"""
import torch, triton, triton.language as tl

from lab import common

@triton.jit
def gemv(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
         MODE: tl.constexpr):
    # MODE 0: plain; 1: PDL, wait at the top; 2: PDL, first weight tile loaded before the wait; the next
    # kernel may launch as soon as every program got here (1, 2: the top) or (3, 4: after its store) as 1, 2;
    # 5: as 2, but the next kernel launches only when this one ends (no early trigger: a grid of several waves
    # keeps its SMs to itself)
    if MODE == 1 or MODE == 2:
        tl.extra.cuda.gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    row_start = w_ptr + rows.to(tl.int64) * K
    cols = tl.arange(0, BLOCK_K)
    k_ok = cols < K
    if MODE == 1 or MODE == 3:
        tl.extra.cuda.gdc_wait()
    w = tl.load(row_start[:, None] + cols[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    if MODE == 2 or MODE == 4 or MODE == 5:
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + cols, mask=k_ok, other=0.0).to(tl.float32)
    acc = w * x[None, :]
    for k0 in range(BLOCK_K, K, BLOCK_K):
        k = k0 + cols
        k_ok = k < K
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0).to(tl.float32)
        w = tl.load(row_start[:, None] + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0,
                    eviction_policy="evict_first").to(tl.float32)
        acc += w * x[None, :]
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)
    if MODE >= 3:
        tl.extra.cuda.gdc_launch_dependents()

def cfg(N, K, sms):
    bn = 2
    many = triton.cdiv(N, bn) >= 64 * sms
    bk = min(512 if many else 2048, max(16, triton.next_power_of_2(K)))
    return bn, bk, max(1, bn * bk // 512)

def main(out):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = []
    for _ in range(24):
        shapes += [(6144, 1024), (1024, 2048), (7168, 1024), (1024, 3584)]
    shapes.append((248320, 1024))
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.03 for n, k in shapes]
    x0 = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    ys = [torch.empty(n, device=dev, dtype=torch.bfloat16) for n, _ in shapes]
    nbytes = sum(w.numel() * 2 for w in ws)
    def chain(mode):
        x = x0
        for (n, k), w, y in zip(shapes, ws, ys):
            bn, bk, nw = cfg(n, k, sms)
            m = mode if mode != 9 else (2 if triton.cdiv(n, bn) <= 4 * sms else 5)   # 9: by the grid's size
            gemv[(triton.cdiv(n, bn),)](x, w, y, n, k, BLOCK_N=bn, BLOCK_K=bk, MODE=m, num_warps=nw,
                                        launch_pdl=m > 0)
            x = y
        return ys[-1]
    # inputs: each GEMV reads the previous output's first K entries (x[:K] as a pointer)
    res = common.header(bytes=nbytes, kernels=len(shapes))
    ref = None
    for mode in (0, 1, 2, 3, 4, 9, 0):
        for _ in range(2):
            chain(mode)
        torch.cuda.synchronize()
        out_eager = ys[-1].clone()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            g.capture_begin(); chain(mode); g.capture_end()
        torch.cuda.synchronize()
        g.replay(); torch.cuda.synchronize()
        same = torch.equal(ys[-1], out_eager)
        ref = out_eager if ref is None else ref
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(20): g.replay()
        times = []
        for _ in range(5):
            e0.record()
            for _ in range(100): g.replay()
            e1.record(); torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / 100 * 1000)
        t = sorted(times)[2]
        key = f"mode{mode}" if f"mode{mode}" not in res else f"mode{mode}_again"   # mode 0 runs first and last
        res[key] = {"us": t, "GBps": nbytes / t / 1e3, "graph_equals_eager": same,
                    "equals_mode0": torch.equal(out_eager, ref)}
        print(key, res[key], flush=True)
    # the same with one GEMV shape alone, 200 times, to see per-kernel numbers
    for (n, k) in [(6144, 1024), (1024, 3584), (7168, 1024), (1024, 2048)]:
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        xv = torch.randn(max(n, k), device=dev, dtype=torch.bfloat16)
        yv = torch.empty(max(n, k), device=dev, dtype=torch.bfloat16)
        bn, bk, nw = cfg(n, k, sms)
        for mode in (0, 2, 4):
            def run():
                for i in range(100):
                    src, dst = (xv, yv) if i % 2 == 0 else (yv, xv)
                    gemv[(triton.cdiv(n, bn),)](src, w, dst, n, k, BLOCK_N=bn, BLOCK_K=bk, MODE=mode,
                                                num_warps=nw, launch_pdl=mode > 0)
            run(); torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(torch.cuda.Stream()):
                g.capture_begin(); run(); g.capture_end()
            for _ in range(5): g.replay()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20): g.replay()
            e1.record(); torch.cuda.synchronize()
            t = e0.elapsed_time(e1) / 2000 * 1000
            res[f"{n}x{k}_mode{mode}"] = {"us": t, "GBps": n * k * 2 / t / 1e3}
            print(n, k, mode, res[f"{n}x{k}_mode{mode}"], flush=True)
    common.save(common.result_path(out, "pdl_probe"), res)

if __name__ == "__main__":
    main(common.out_dir())
