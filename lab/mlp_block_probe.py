"""Is one token's MLP sublayer faster as one kernel with a grid-wide barrier than as its two GEMV kernels?

    python -m lab.mlp_block_probe [OUTDIR]     (on a GPU; writes OUTDIR/mlp_block_<gpu>_<date>.json)

Question: at decode the fast level runs the MLP as two kernels: ln2 + gate/up + SwiGLU (7168 x 1024), then
down + residual (1024 x 3584). Each pays a GEMV's fixed cost (launch, first-byte latency, tail): the down
projection's 7.3 MB take ~4 us where their bytes alone would take 1.7. The down projection's weights do
not depend on anything the first half computes, only its input h does. Can one kernel load them early and
save the second launch?
Method: one kernel of a few hundred programs loads its rows of W_down first (e.g. 8 rows x 3584 = 57 KB a
program, held in registers), computes its share of h = silu(gate) * up, waits at a grid-wide barrier
(`common.grid_barrier`) until every program has stored its share, and finishes the down rows from
registers: one launch, and the second GEMV's bytes stream in while the first half runs. The barrier needs
every program resident at once (checked against the compiled kernel's registers before it is launched,
`common.fits_one_wave`; the launch is cooperative). Under the CPU interpreter programs run one after the
other and a barrier would wait forever: there the kernel runs as two launches (PHASE 1, then 2) with the
same arithmetic (`check`, run by the tests). Timed on the GPU beside the fast level's two kernels on 24
layers of distinct weights in one CUDA graph (bf16, `common.timed_layers`), eight grids of 128-896
programs on 2-8 warps; the outputs compared with theirs and with the two-launch form (bit for bit).
Result: NVIDIA H200, 2026-11-30 (lab/results/mlp_block_nvidia-h200_2026-11-30.json): the fast level's two
kernels 9.70 us a layer; the one kernel 10.4-15.6 us over seven grids (10.43 at 528 programs of 4 warps;
the 896-program, 2-warp grid needs 142 registers and does not fit), the same grids as two launches
11.1-22.0 us. The barrier saves ~1 us over a second launch of the same code, but a grid small enough to
be resident at once streams the gate/up weights slower than the fast level's 896 small programs.
Verdict: not adopted: the fast level keeps its two kernels (`rms_norm_gate_up_swiglu` and
`linear_residual`, solutions/norm_fusion.py and solutions/layer_fusion.py); lab/layer_phases_probe.py tried
the same with the fast level's own kernels as the phases.
"""
import torch
import triton
import triton.language as tl

from lab import common
from lab.common import fits_one_wave, grid_barrier, timed_layers
from tritonllm_course.triton_helpers import silu


@triton.jit
def mlp_block_kernel(x_ptr, lnw_ptr, wgu_ptr, wd_ptr, h_ptr, y_ptr, counter_ptr, K, I, N, eps,
                     ROWS_I: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr,
                     ROWS_N: tl.constexpr, BLOCK_H: tl.constexpr, STAGES: tl.constexpr, PHASE: tl.constexpr):
    """y = x + W_d (silu(W_g xn) * (W_u xn)), xn = rms_norm(x) * (1 + lnw); one token. x, lnw [K]; wgu
    [2I, K] = [W_g; W_u]; wd [N, I]; h [I] a workspace; y [N] may be x. Program p computes h rows
    p*ROWS_I.. and y rows p*ROWS_N... PHASE 0: both halves with the grid barrier between; 1: the first
    half only; 2: the second only (two launches, for the interpreter)."""
    p = tl.program_id(0)
    cols = tl.arange(0, BLOCK_K)                                     # BLOCK_K >= K: whole rows
    k_ok = cols < K
    rn = p * ROWS_N + tl.arange(0, ROWS_N)
    n_ok = rn < N
    ch = tl.arange(0, BLOCK_H)                                       # BLOCK_H >= I: all of h
    h_ok = ch < I
    if PHASE != 1:      # W_d's rows first: they depend on nothing computed here
        wd = tl.load(wd_ptr + rn.to(tl.int64)[:, None] * I + ch[None, :], mask=n_ok[:, None] & h_ok[None, :],
                     other=0.0, eviction_policy="evict_first")      # [ROWS_N, BLOCK_H], stored dtype
    if PHASE != 2:
        x = tl.load(x_ptr + cols, mask=k_ok, other=0.0).to(tl.float32)
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)
        xn = x * inv_rms * (1.0 + tl.load(lnw_ptr + cols, mask=k_ok, other=0.0).to(tl.float32))   # [BLOCK_K]
        for i0 in tl.range(0, ROWS_I, BLOCK_I, num_stages=STAGES):
            ri = p * ROWS_I + i0 + tl.arange(0, BLOCK_I)
            i_ok = ri < I
            tile = ri.to(tl.int64)[:, None] * K + cols[None, :]      # [BLOCK_I, BLOCK_K]
            m = i_ok[:, None] & k_ok[None, :]
            gate = tl.load(wgu_ptr + tile, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
            up = tl.load(wgu_ptr + I * K + tile, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
            g = tl.sum(gate * xn[None, :], axis=1)
            u = tl.sum(up * xn[None, :], axis=1)
            tl.store(h_ptr + ri, (silu(g) * u).to(h_ptr.dtype.element_ty), mask=i_ok)
    if PHASE == 0:      # every program's share of h stored before any program reads h
        grid_barrier(counter_ptr, tl.num_programs(0))
    if PHASE != 1:
        h = tl.load(h_ptr + ch, mask=h_ok, other=0.0, cache_modifier=".cg").to(tl.float32)   # from L2
        r = tl.load(x_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)
        y = tl.sum(wd.to(tl.float32) * h[None, :], axis=1) + r
        tl.store(y_ptr + rn, y.to(y_ptr.dtype.element_ty), mask=n_ok)


def layout(K, I, N, programs, block_i):
    """The constexprs for a grid of `programs`: h rows and y rows per program, tile widths."""
    rows_n = triton.next_power_of_2(triton.cdiv(N, programs))
    return {"ROWS_I": triton.cdiv(triton.cdiv(I, programs), block_i) * block_i, "BLOCK_I": block_i,
            "BLOCK_K": triton.next_power_of_2(K), "ROWS_N": rows_n, "BLOCK_H": triton.next_power_of_2(I)}


def mlp_block(x, lnw, wgu, wd, h, counter, out, eps=1e-6, programs=128, block_i=4, warps=8, stages=2,
              split=False):
    """One token's MLP sublayer into `out` (may be x): one launch with the barrier, or (split) two."""
    K, I, N = x.shape[-1], wgu.shape[0] // 2, wd.shape[0]
    meta = layout(K, I, N, programs, block_i)
    for phase in ((1, 2) if split else (0,)):
        # one launch: cooperative, so a grid that cannot be resident at once fails to launch instead of
        # waiting at the barrier forever
        mlp_block_kernel[(programs,)](x, lnw, wgu, wd, h, out, counter, K, I, N, eps, **meta, STAGES=stages,
                                      PHASE=phase, num_warps=warps, launch_cooperative_grid=phase == 0)
    return out


def reference(x, lnw, wgu, wd, eps=1e-6):
    """fp64: x + W_d (silu(gate) * up) of the RMS-normalised x."""
    x, lnw, wgu, wd = (t.double() for t in (x, lnw, wgu, wd))
    xn = x * torch.rsqrt(x.pow(2).mean() + eps) * (1 + lnw)
    gate, up = (wgu @ xn).chunk(2)
    return x + wd @ (torch.nn.functional.silu(gate) * up)


def check(device="cpu"):
    """Odd sizes, programs that own a partial share, a NaN-poisoned workspace, the stream updated in place:
    the two-launch form under the interpreter; the largest relative error against fp64."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for D, I, programs in [(70, 50, 5), (37, 33, 4)]:          # hidden size D (in and out), intermediate I
        x = torch.randn(D, generator=gen)
        lnw = 0.1 * torch.randn(D, generator=gen)
        wgu = torch.randn(2 * I, D, generator=gen) / D ** 0.5
        wd = torch.randn(D, I, generator=gen) / I ** 0.5
        x, lnw, wgu, wd = (t.to(device) for t in (x, lnw, wgu, wd))
        want = reference(x, lnw, wgu, wd)
        h = torch.full((I,), float("nan"), device=device)
        y = x.clone()
        mlp_block(y, lnw, wgu, wd, h, torch.zeros(1, dtype=torch.int32, device=device), y, programs=programs,
                  block_i=4, warps=1, stages=1, split=device == "cpu")
        worst = max(worst, common.rel_err(y, want))
    return worst


CONFIGS = [{"programs": 128, "block_i": 4, "warps": 8, "stages": 2},      # one program per SM
           {"programs": 128, "block_i": 4, "warps": 8, "stages": 1},
           {"programs": 264, "block_i": 8, "warps": 8, "stages": 2},      # two programs per SM
           {"programs": 448, "block_i": 8, "warps": 4, "stages": 1},      # 8 h rows each, one step
           {"programs": 528, "block_i": 8, "warps": 4, "stages": 1},
           {"programs": 896, "block_i": 4, "warps": 2, "stages": 1},      # the fast level's gate/up grid
           {"programs": 896, "block_i": 4, "warps": 4, "stages": 1},
           {"programs": 512, "block_i": 8, "warps": 2, "stages": 1}]


def main(out):
    common.setup()
    from tritonllm_course import kernels
    fus = kernels.load("norm_fusion", "solutions").module
    lay = kernels.load("layer_fusion", "solutions").module
    path = common.result_path(out, "mlp_block")
    D, I, L, eps = 1024, 3584, 24, 1e-6
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*size, scale=1.0):
        return (scale * torch.randn(*size, device="cuda", generator=gen)).to(torch.bfloat16)

    layers = [{"lnw": randn(D, scale=0.1), "wgu": randn(2 * I, D, scale=0.02), "wd": randn(D, I, scale=0.02)}
              for _ in range(L)]                                      # 24 x 22 MB: far past L2
    x0 = randn(D)
    act = torch.empty(1, I, device="cuda", dtype=torch.bfloat16)
    h = torch.empty(I, device="cuda", dtype=torch.bfloat16)
    counter = torch.zeros(1, device="cuda", dtype=torch.int32)
    x = x0.clone()

    def pair():                     # the fast level's two kernels per layer
        for lw in layers:
            fus.rms_norm_gate_up_swiglu(x.view(1, D), lw["lnw"], lw["wgu"], eps, out=act)
            lay.linear_residual(act, lw["wd"], x.view(1, D), out=x.view(1, D))

    def block(cfg, split):
        counter.zero_()     # the barrier's count stays a multiple of the grid only for one grid size
        def run():
            for lw in layers:
                mlp_block(x, lw["lnw"], lw["wgu"], lw["wd"], h, counter, x, eps, split=split, **cfg)
        return run

    def timed(fn):
        return timed_layers(fn, x, x0, L)

    nbytes = sum(lw["wgu"].numel() * 2 + lw["wd"].numel() * 2 for lw in layers) // L
    res = common.header(check_rel_err=check("cuda"), layers=L, bytes_per_layer=nbytes, rows=[])
    us, want = timed(pair)
    res["rows"].append({"variant": "two kernels (fast level)", "us_per_layer": us, "GBps": nbytes / us / 1e3})
    print(res["rows"][-1], flush=True)
    for cfg in CONFIGS:
        row = {"variant": "one kernel, grid barrier", **cfg}
        try:
            us_split, split_out = timed(block(cfg, True))
            meta = layout(D, I, D, cfg["programs"], cfg["block_i"])
            lw = layers[0]
            compiled = mlp_block_kernel.warmup(x, lw["lnw"], lw["wgu"], lw["wd"], h, x, counter, D, I, D, eps, **meta,
                                               STAGES=cfg["stages"], PHASE=0, num_warps=cfg["warps"],
                                               grid=(cfg["programs"],))
            why = fits_one_wave(compiled, cfg["programs"], cfg["warps"])
            row.update(us_two_launches=us_split, regs=compiled.n_regs)
            if why:
                row["skipped"] = why
            else:
                us_one, one_out = timed(block(cfg, False))
                err = ((one_out.float() - want.float()).norm() / want.float().norm()).item()
                row.update(us_per_layer=us_one, GBps=nbytes / us_one / 1e3, rel_err_vs_two_kernels=err,
                           bit_identical_to_two_launches=bool(torch.equal(one_out, split_out)))
        except Exception as e:      # recorded, not fatal: the next config still runs
            row["error"] = common.error_text(e)
        common.keep_row(res, path, row)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
