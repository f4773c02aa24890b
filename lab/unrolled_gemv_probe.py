"""Does a decode GEMV get faster when its walk along K is unrolled, so that all its loads are in flight at once?

    python -m lab.unrolled_gemv_probe [OUTDIR]    (on a GPU; writes OUTDIR/unrolled_gemv_<gpu>_<date>.json)

Question: lab/gemv_bounds_probe.py found a decode GEMV waiting on its programs' round trips to memory, not
on its bytes. The norm-folded GEMVs of the fast level walk K = 1024 in 2-4 steps (`range(0, K, BLOCK_K)`,
K a runtime value): each step's loads are issued only once the step before has used its own, so a
program makes 2-4 round trips one after another. With K a compile-time constant the walk can be unrolled
(`tl.static_range`) and the compiler may issue every step's loads up front: one round trip, at the price
of the registers that hold them. Is that faster?
Method: the fast level's fused GEMV (`fused_gemv_kernel`: RMSNorm folded in, gated or not, or neither:
the plain GEMV), whose walk is a compile-time choice (`UNROLL`: K, or 0 for a loop), is timed at the
decode shapes with the fast level's config and a list of seven (six others where it is one of them), both
walks, each beside the fast level's own launch on the same inputs (64 launches over distinct copies of the
weight in one CUDA graph, `common.per_launch_us`, as lab/gemv_bounds_probe.py times). The tests run both
walks under the CPU interpreter (`check`).
Result: NVIDIA H200, 2026-11-30 (lab/results/unrolled_gemv_nvidia-h200_2026-11-30.json; measured with a
copy of the kernel's walk in this probe, which the kernel now has), against the fast level's kernel as it
was (a run-time walk): attention in_proj + ln1 4.90 -> 4.54 us, DeltaNet in_proj + ln1 5.93 -> 5.63 us
(same tiles, unrolled), gate/up + ln2 + SwiGLU 5.76 -> 5.25 us (8 rows x 256 on 4 warps, unrolled; its
old 4 x 512 tiles unrolled: 6.18); the plain GEMVs of 1024 outputs gain 2-3% (one or two steps). In the
decode step, the DeltaNet in-projection whose epilogue is the conv's step went 6.48 (a profile not kept) ->
7.36 us unrolled (lab/results/profile_nvidia-h200_2026-11-30_conv_unrolled.{json,md}: its 2,056 programs no
longer fit on the SMs at once).
Verdict: adopted in solutions/norm_fusion.py: `fused_gemv_kernel` unrolls its walk (K a constexpr, `UNROLL`)
and `fused_gemv_config` sets it, with 8-row gate/up programs, except where the conv's step is the epilogue
(`conv=True`), which keeps its loop (the engine run lab/results/engine_runs/residual_first/ -> the current
results/engine_nvidia-h200_2026-11-30/: decode 0.709 -> 0.704 ms a token). That holds without PDL; with it
(the default on sm_90+) every decode GEMV, the conv's included, takes one whole tile (`UNROLL` = K,
`triton_helpers.pdl_gemv_config`, lab/pdl_chain_probe.py).
"""
import torch
import triton

from lab import common
from lab.common import LAUNCHES, per_launch_us, weight_copies
from tritonllm_course import kernels

common.setup()
F = kernels.load("norm_fusion", "solutions").module                 # the fast level's fused GEMV
LF = kernels.load("layer_fusion", "solutions").module               # and its GEMV + residual


def walk_gemv(x, nw, w, u, y, cfg, unroll, eps=1e-6):
    """The fast level's `fused_gemv_kernel` on x [K], W (and U) [N, K], y [N], with the launch config `cfg`,
    its walk along K unrolled (UNROLL = K) or a loop (UNROLL = 0)."""
    N, K = w.shape
    F.fused_gemv_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](
        x, w if nw is None else nw, w, w if u is None else u, y, N, K, eps, w, w, 0, HAS_NORM=nw is not None,
        GATED=u is not None, BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], UNROLL=K if unroll else 0,
        num_warps=cfg["num_warps"])
    return y


def reference(x, nw, w, u, eps=1e-6):
    x, w = x.double(), w.double()
    if nw is not None:
        x = x * torch.rsqrt(x.pow(2).mean() + eps) * (1 + nw.double())
    y = w @ x
    return y if u is None else torch.nn.functional.silu(y) * (u.double() @ x)


def check(device="cpu"):
    """Odd shapes, K not a multiple of the step, every option, both walks, a NaN-poisoned output: the largest
    relative error against fp64."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for N, K, norm, gated in [(37, 70, True, True), (5, 33, True, False), (19, 40, False, False)]:
        x = torch.randn(K, generator=gen).to(device)
        nw = (0.1 * torch.randn(K, generator=gen)).to(device) if norm else None
        w = torch.randn(N, K, generator=gen).to(device)
        u = torch.randn(N, K, generator=gen).to(device) if gated else None
        want = reference(x, nw, w, u)
        for unroll in (False, True):
            y = torch.full((N,), float("nan"), device=device)
            walk_gemv(x, nw, w, u, y, {"BLOCK_N": 4, "BLOCK_K": 16, "num_warps": 1}, unroll)
            worst = max(worst, common.rel_err(y, want))
    return worst


CASES = [  # name, N, K, norm, gated
    ("DeltaNet in_proj + ln1", 8224, 1024, True, False),
    ("attention qkv + ln1", 5120, 1024, True, False),
    ("gate/up + ln2 + SwiGLU", 3584, 1024, True, True),
    ("down", 1024, 3584, False, False),
    ("o_proj / out_proj", 1024, 2048, False, False),
]


def main(out):
    from tritonllm_course.measure.benchmark import ceiling_gbps
    path = common.result_path(out, "unrolled_gemv")
    torch.manual_seed(0)
    ceiling = ceiling_gbps()
    res = common.header(launches=LAUNCHES, ceiling_GBps=ceiling, check_rel_err=check("cuda"), cases=[])
    for name, N, K, norm, gated in CASES:
        nbytes = N * K * 2 * (2 if gated else 1)
        ws = weight_copies(2 * N if gated else N, K)                     # gated: [W_gate; W_up]
        w0, copies = ws[0], len(ws)
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        nw = 0.1 * torch.randn(K, device="cuda", dtype=torch.bfloat16) if norm else None
        y = torch.empty(N, device="cuda", dtype=torch.bfloat16)
        zero = torch.zeros(1, N, device="cuda", dtype=torch.bfloat16)       # the residual of the plain case
        want = reference(x, nw, w0[:N], w0[N:] if gated else None)

        def fast(i):                 # the fast level's own kernel for this slot
            w = ws[i % copies]
            if gated:
                F.rms_norm_gate_up_swiglu(x.view(1, K), nw, w, out=y.view(1, N))
            elif norm:
                F.rms_norm_linear(x.view(1, K), nw, w, out=y.view(1, N))
            else:
                LF.linear_residual(x.view(1, K), w, zero, out=y.view(1, N))
        base = per_launch_us(lambda: [fast(i) for i in range(LAUNCHES)])
        engine_cfg = F.fused_gemv_config(N, K, norm=norm, gated=gated)
        case = {"case": name, "N": N, "K": K, "MB": nbytes / 1e6, "fast_level_us": base, "fast_level_cfg": engine_cfg,
                "rows": []}
        cfgs = [engine_cfg] + [c for c in ({"BLOCK_N": 2, "BLOCK_K": 256, "num_warps": 1},
                                           {"BLOCK_N": 2, "BLOCK_K": 512, "num_warps": 2},
                                           {"BLOCK_N": 4, "BLOCK_K": 256, "num_warps": 2},
                                           {"BLOCK_N": 4, "BLOCK_K": 512, "num_warps": 4},
                                           {"BLOCK_N": 2, "BLOCK_K": 1024, "num_warps": 4},
                                           {"BLOCK_N": 2, "BLOCK_K": 2048, "num_warps": 8},
                                           {"BLOCK_N": 8, "BLOCK_K": 256, "num_warps": 4}) if c != engine_cfg]
        for cfg in cfgs:
            for unroll in (False, True):
                row = {**cfg, "unroll": unroll}
                try:
                    def fn(cfg=cfg, unroll=unroll):
                        for i in range(LAUNCHES):
                            w = ws[i % copies]
                            walk_gemv(x, nw, w[:N], w[N:] if gated else None, y, cfg, unroll)
                    us = per_launch_us(fn)
                    compiled = F.fused_gemv_kernel.warmup(x, nw if norm else w0, w0, w0, y, N, K, 1e-6, w0, w0, 0,
                                                          HAS_NORM=norm, GATED=gated, BLOCK_N=cfg["BLOCK_N"],
                                                          BLOCK_K=cfg["BLOCK_K"], UNROLL=K if unroll else 0,
                                                          num_warps=cfg["num_warps"], grid=(1,))
                    compiled._init_handles()
                    row.update(us=us, pct_of_ceiling=100 * nbytes / us / 1e3 / ceiling, vs_fast_level=base / us,
                               regs=compiled.n_regs, spills=compiled.n_spills,
                               rel_err=common.rel_err(y, want))
                except Exception as e:          # recorded, not fatal
                    row["error"] = common.error_text(e)
                case["rows"].append(row)
        ok = [r for r in case["rows"] if "us" in r]
        case["best"] = sorted(ok, key=lambda r: r["us"])[:3]
        print({k: case[k] for k in ("case", "fast_level_us", "best")}, flush=True)
        res["cases"].append(case)
        common.save(path, res)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
