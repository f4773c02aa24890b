"""Do the fast level's own decode kernels run faster as phases of one kernel, with grid barriers between?

    python -m lab.layer_phases_probe [OUTDIR [ROWS]]   (on a GPU; writes OUTDIR/layer_phases_<gpu>_<date>.json)
    python -m lab.layer_phases_probe lab/results 0,3   (ROWS: only those rows of CONFIGS)

Question: a DeltaNet layer's decode step after its recurrence is three kernels of the fast level: the gated
norm + out-projection + residual (1024 x 2048), ln2 + gate/up + SwiGLU (7168 x 1024), down + residual
(1024 x 3584). lab/mlp_block_probe.py found one MLP kernel with a barrier slower than the two, but its
phases were its own GEMVs, not the tuned ones. With the tuned kernels as the phases, does a grid barrier
beat a kernel boundary?
Method: one cooperative kernel calls the fast level's kernels themselves (`solutions/norm_fusion.py`,
`solutions/layer_fusion.py`) as its phases, program p being program p of each (a phase with fewer programs
than the grid leaves the rest idle), with `common.grid_barrier` (or `polling_barrier` below) between phases:
what is measured is the launch boundary against the barrier, the arithmetic is the same. Every kernel of the
grid has one number of warps, so each variant is also timed as separate launches of the same phases (`split`),
which tells the barrier's gain from the cost of the uniform warps. Timed on 24 layers of distinct weights
(past L2) in one CUDA graph, bf16, beside the fast level's launches: the whole three-kernel tail (`tail`) and
the MLP alone (`mlp`). The outputs are compared bit for bit with the fast level's. Under the CPU interpreter
(the tests) the phases run as separate launches.
Result: NVIDIA H200, 2026-11-30, two runs (lab/results/layer_phases_nvidia-h200_2026-11-30.json: rows 0-5,
the barrier polling with atomics; lab/results/layer_phases_nvidia-h200_2026-11-30_poll.json: rows 0, 3,
6-9). The one kernel is slower than its phases launched separately (MLP, 448 programs x 4 warps: 10.86 vs
10.39 us a layer; the tail 15.11 vs 14.04); the barrier that polls with loads is slower still (MLP 12.29);
256 programs bring the one kernel level with the split form (MLP 10.79 vs 10.83, tail 14.00 vs 14.44) and
no lower. The fast level's own launches stay ahead: MLP 9.93-9.95, tail 13.19-13.20 us a layer.
Verdict: not adopted: the fast level keeps one launch per kernel (tritonllm_course/engine, replayed from a
CUDA graph). A grid-wide barrier of a few hundred programs costs more than a kernel boundary inside a
graph; a decode step as one kernel would need finer dependencies (a counter per block of rows).
"""
import sys

import torch
import triton
import triton.language as tl

from lab import common
from lab.common import fits_one_wave, grid_barrier, timed_layers
from tritonllm_course import kernels

common.setup()
NF = kernels.load("norm_fusion", "solutions").module                # the fast level's kernels, called as phases
LF = kernels.load("layer_fusion", "solutions").module


@triton.jit
def polling_barrier(counter_ptr, P):
    """grid_barrier with a cheaper wait: arrive with one atomic (release), then poll with plain volatile
    loads instead of atomics (which queue at L2 behind the other programs' arrivals), and one acquire
    fence at the end."""
    tl.debug_barrier()
    ticket = tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")
    target = (ticket // P + 1) * P
    seen = ticket + 1
    while seen < target:
        seen = tl.load(counter_ptr, volatile=True)
    tl.inline_asm_elementwise("fence.acq_rel.gpu; mov.u32 $0, $1;", "=r,r", [seen], dtype=tl.int32,
                              is_pure=False, pack=1)
    tl.debug_barrier()


@triton.jit
def phase_barrier(counter_ptr, POLL: tl.constexpr):
    if POLL:
        polling_barrier(counter_ptr, tl.num_programs(0))
    else:
        grid_barrier(counter_ptr, tl.num_programs(0))


@triton.jit
def layer_phases_kernel(a_ptr, z_ptr, gnw_ptr, wo_ptr, x_ptr, lnw_ptr, wg_ptr, wu_ptr, wd_ptr, h_ptr, counter_ptr,
                        N, KO, I, eps, sz,
                        DV: tl.constexpr, BN_O: tl.constexpr, BK_O: tl.constexpr, BN_GU: tl.constexpr,
                        BK_GU: tl.constexpr, BN_D: tl.constexpr, BK_D: tl.constexpr,
                        FIRST: tl.constexpr, LAST: tl.constexpr, POLL: tl.constexpr = False):
    """Phases FIRST..LAST of one token's layer tail, a grid barrier between two phases:
    0: x += W_o gated_norm(a, z)      (x [N] the stream, a/z [KO] = heads * DV, W_o [N, KO])
    1: h = silu(W_g n) * (W_u n), n = rms_norm(x) * (1 + lnw)      (h [I], W_g/W_u [I, N])
    2: x += W_d h                     (W_d [N, I])"""
    p = tl.program_id(0)
    if FIRST <= 0:
        if p * BN_O < N:
            LF.gated_norm_gemv_residual_kernel(a_ptr, z_ptr, gnw_ptr, wo_ptr, x_ptr, x_ptr, N, KO, KO, sz, eps,
                                               DV=DV, BLOCK_N=BN_O, BLOCK_K=BK_O)
        if LAST > 0:
            phase_barrier(counter_ptr, POLL)
    if FIRST <= 1 and LAST >= 1:
        if p * BN_GU < I:
            NF.fused_gemv_kernel(x_ptr, lnw_ptr, wg_ptr, wu_ptr, h_ptr, I, N, eps, x_ptr, x_ptr, 0,
                                 HAS_NORM=True, GATED=True, BLOCK_N=BN_GU, BLOCK_K=BK_GU)
        if LAST > 1:
            phase_barrier(counter_ptr, POLL)
    if LAST >= 2:
        if p * BN_D < N:
            LF.gemv_residual_kernel(h_ptr, wd_ptr, x_ptr, x_ptr, N, I, BLOCK_N=BN_D, BLOCK_K=BK_D)


def programs(cfg, N, I, first, last):
    """The grid: the most programs any of the phases first..last needs."""
    need = [triton.cdiv(N, cfg["BN_O"]), triton.cdiv(I, cfg["BN_GU"]), triton.cdiv(N, cfg["BN_D"])]
    return max(need[first:last + 1])


def run_phases(lw, a, z, x, h, counter, cfg, first, last, split, eps=1e-6):
    """Phases first..last for one layer's weights lw: one launch (cooperative, so a grid that cannot be
    resident at once fails instead of waiting at a barrier forever), or (split) one launch per phase."""
    N, KO = lw["wo"].shape
    I = lw["wgu"].shape[0] // 2
    wg, wu = lw["wgu"][:I], lw["wgu"][I:]
    meta = {k: cfg[k] for k in ("BN_O", "BK_O", "BN_GU", "BK_GU", "BN_D", "BK_D")}
    spans = [(i, i) for i in range(first, last + 1)] if split else [(first, last)]
    for f, l in spans:
        P = programs(cfg, N, I, f, l)
        layer_phases_kernel[(P,)](a, z, lw["gnw"], lw["wo"], x, lw["lnw"], wg, wu, lw["wd"], h, counter,
                                  N, KO, I, eps, z.stride(0), DV=lw["gnw"].shape[0], **meta, FIRST=f, LAST=l,
                                  POLL=cfg.get("poll", False), num_warps=cfg["warps"],
                                  launch_cooperative_grid=f != l)


def run_fast_level(lw, a, z, x, h, first, last, eps=1e-6):
    """The same phases as the fast level launches them (its wrappers, its configs)."""
    N, I, DV = x.shape[-1], lw["wgu"].shape[0] // 2, lw["gnw"].shape[0]
    if first <= 0:
        LF.gated_norm_linear_residual(a.view(1, -1, DV), z.view(1, -1, DV), lw["gnw"], lw["wo"], x.view(1, N), eps,
                                      out=x.view(1, N))                 # a, z [1, HV * DV] -> [1, HV, DV]
    if first <= 1 <= last:
        NF.rms_norm_gate_up_swiglu(x.view(1, N), lw["lnw"], lw["wgu"], eps, out=h.view(1, I))
    if last >= 2:
        LF.linear_residual(h.view(1, I), lw["wd"], x.view(1, N), out=x.view(1, N))


def make_layer(N, I, HV, DV, gen, device, dtype, scale=1.0):
    def randn(*size, s=1.0):
        return (s * scale * torch.randn(*size, generator=gen)).to(device=device, dtype=dtype)
    return {"gnw": 1 + randn(DV, s=0.1), "wo": randn(N, HV * DV, s=(HV * DV) ** -0.5), "lnw": randn(N, s=0.1),
            "wgu": randn(2 * I, N, s=N ** -0.5), "wd": randn(N, I, s=I ** -0.5)}


def reference(lw, a, z, x, first, last, eps=1e-6):
    """fp64 phases first..last; returns the new stream x."""
    lw = {k: v.double() for k, v in lw.items()}
    x = x.double()
    DV = lw["gnw"].shape[0]
    if first <= 0:
        heads = a.double().view(-1, DV)                                   # [HV, DV]
        g = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + eps) * lw["gnw"]
        g = g.reshape(-1) * torch.nn.functional.silu(z.double().reshape(-1))            # [HV * DV]
        x = x + lw["wo"] @ g
    if last >= 1:
        n = x * torch.rsqrt(x.pow(2).mean() + eps) * (1 + lw["lnw"])
        gate, up = (lw["wgu"] @ n).chunk(2)
        h = torch.nn.functional.silu(gate) * up
        if last >= 2:
            x = x + lw["wd"] @ h
        else:
            return h
    return x


def check(device="cpu"):
    """Odd sizes, grids wider than some phases, NaN-poisoned h, the stream updated in place: the phases as
    separate launches (the interpreter runs programs one after another); the largest relative error of the
    new stream against fp64 (and of the fast level's launches), over the whole tail and the MLP alone."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    N, I, HV, DV = 37, 29, 3, 16
    cfg = {"BN_O": 4, "BK_O": 64, "BN_GU": 2, "BK_GU": 16, "BN_D": 8, "BK_D": 16, "warps": 1}
    for first in (0, 1):
        lw = make_layer(N, I, HV, DV, gen, device, torch.float32)
        a = torch.randn(1, HV * DV, generator=gen).to(device)
        z = torch.randn(1, HV * DV, generator=gen).to(device)
        x = torch.randn(N, generator=gen).to(device)
        want = reference(lw, a, z, x, first, 2)
        h = torch.full((I,), float("nan"), device=device)
        x_fast = x.clone()
        run_phases(lw, a, z, x, h, torch.zeros(1, dtype=torch.int32, device=device), cfg, first, 2, split=True)
        run_fast_level(lw, a, z, x_fast, h, first, 2)
        worst = max(worst, *(common.rel_err(y, want) for y in (x, x_fast)))
    return worst


# the fast level's configs for these shapes: out-proj and down 2 rows x 2048 on 8 warps, gate/up 4 rows x 512
# on 2; one kernel has one number of warps, so each variant chooses one
CONFIGS = [{"BN_O": 2, "BK_O": 2048, "BN_GU": 4, "BK_GU": 512, "BN_D": 2, "BK_D": 2048, "warps": 2},
           {"BN_O": 2, "BK_O": 2048, "BN_GU": 4, "BK_GU": 512, "BN_D": 2, "BK_D": 2048, "warps": 4},
           {"BN_O": 2, "BK_O": 1024, "BN_GU": 4, "BK_GU": 512, "BN_D": 2, "BK_D": 1024, "warps": 2},
           {"BN_O": 4, "BK_O": 2048, "BN_GU": 8, "BK_GU": 512, "BN_D": 4, "BK_D": 2048, "warps": 4},
           {"BN_O": 4, "BK_O": 1024, "BN_GU": 8, "BK_GU": 256, "BN_D": 4, "BK_D": 1024, "warps": 4},
           {"BN_O": 8, "BK_O": 2048, "BN_GU": 8, "BK_GU": 1024, "BN_D": 8, "BK_D": 2048, "warps": 8},
           # the barrier that polls with loads
           {"BN_O": 2, "BK_O": 2048, "BN_GU": 4, "BK_GU": 512, "BN_D": 2, "BK_D": 2048, "warps": 2, "poll": True},
           {"BN_O": 4, "BK_O": 2048, "BN_GU": 8, "BK_GU": 512, "BN_D": 4, "BK_D": 2048, "warps": 4, "poll": True},
           {"BN_O": 4, "BK_O": 2048, "BN_GU": 16, "BK_GU": 512, "BN_D": 4, "BK_D": 2048, "warps": 4},
           {"BN_O": 4, "BK_O": 2048, "BN_GU": 16, "BK_GU": 512, "BN_D": 4, "BK_D": 2048, "warps": 4, "poll": True}]


def main(out, rows=None):
    """rows: "0,3" runs only those rows of CONFIGS (default: all)."""
    path = common.result_path(out, "layer_phases")
    N, I, HV, DV, L, eps = 1024, 3584, 16, 128, 24, 1e-6
    gen = torch.Generator().manual_seed(0)
    layers = [make_layer(N, I, HV, DV, gen, "cuda", torch.bfloat16) for _ in range(L)]   # 24 x 26 MB: past L2
    a = torch.randn(1, HV * DV, generator=gen).to("cuda", torch.bfloat16)
    z = torch.randn(1, HV * DV, generator=gen).to("cuda", torch.bfloat16)
    x0 = torch.randn(N, generator=gen).to("cuda", torch.bfloat16)
    x = x0.clone()
    h = torch.empty(I, device="cuda", dtype=torch.bfloat16)
    counter = torch.zeros(1, device="cuda", dtype=torch.int32)

    def timed(step):
        def fn():
            for lw in layers:
                step(lw)
        return timed_layers(fn, x, x0, L)

    res = common.header(check_rel_err=check("cuda"), layers=L, rows=[])
    configs = CONFIGS if rows is None else [CONFIGS[int(i)] for i in rows.split(",")]
    for name, first in (("tail", 0), ("mlp", 1)):
        lw0 = layers[0]
        nbytes = sum(lw0[k].numel() * 2 for k in (("wo", "wgu", "wd") if first == 0 else ("wgu", "wd")))
        us, want = timed(lambda lw: run_fast_level(lw, a, z, x, h, first, 2, eps))
        row = {"chain": name, "variant": "fast level (its launches)", "us_per_layer": us, "GBps": nbytes / us / 1e3}
        res["rows"].append(row)
        print(row, flush=True)
        for cfg in configs:
            row = {"chain": name, "variant": "one kernel, grid barriers", **cfg}
            try:
                us_split, split_out = timed(lambda lw: run_phases(lw, a, z, x, h, counter, cfg, first, 2, True, eps))
                row.update(us_split=us_split, split_bit_identical=bool(torch.equal(split_out, want)))
                P = programs(cfg, N, I, first, 2)
                meta = {k: cfg[k] for k in ("BN_O", "BK_O", "BN_GU", "BK_GU", "BN_D", "BK_D")}
                compiled = layer_phases_kernel.warmup(
                    a, z, lw0["gnw"], lw0["wo"], x, lw0["lnw"], lw0["wgu"], lw0["wgu"], lw0["wd"], h, counter,
                    N, HV * DV, I, eps, z.stride(0), DV=DV, **meta, FIRST=first, LAST=2,
                    POLL=cfg.get("poll", False), num_warps=cfg["warps"], grid=(P,))
                why = fits_one_wave(compiled, P, cfg["warps"])
                row.update(programs=P, regs=compiled.n_regs)
                if why:
                    row["skipped"] = why
                else:
                    counter.zero_()     # the barrier's count is a multiple of the grid for one grid size only
                    us_one, one_out = timed(lambda lw: run_phases(lw, a, z, x, h, counter, cfg, first, 2, False, eps))
                    row.update(us_per_layer=us_one, GBps=nbytes / us_one / 1e3,
                               bit_identical=bool(torch.equal(one_out, want)))
            except Exception as e:      # recorded, not fatal: the next config still runs
                row["error"] = common.error_text(e)
            common.keep_row(res, path, row)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir(), sys.argv[2] if len(sys.argv) > 2 else None)
