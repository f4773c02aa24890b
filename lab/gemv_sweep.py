"""Are the hand-picked launch configs of the decode step's GEMV-family kernels the fastest at the real shapes?

    python -m lab.gemv_sweep [OUTDIR]      (on a GPU; SWEEP_S=seconds bounds the run, default 300)
    python -m lab.gemv_sweep --plot JSON   (anywhere: the PNG beside the JSON)

Question: chapter 05_projections's GEMV and chapters 21_norm_fusion and 22_layer_fusion's fused GEMVs (RMSNorm
folded in, gated, with the residual) take configs reasoned from the plain GEMV; is any other config faster at
Qwen3.5-0.8B's decode shapes?
Method: rows per program 1-16, columns per step 256-2048, 8-64 elements per thread (which sets num_warps);
each config timed as the course times (`benchmark.time_calls`: a CUDA graph over enough weights to pass
L2), bf16. Writes OUTDIR/gemv_sweep_<gpu>_<date>.json (every config; the hand-picked one and the best)
and a PNG beside it.
Result: NVIDIA H200, 2026-11-30 (lab/results/gemv_sweep_nvidia-h200_2026-11-30.{json,png}), 46-60
configs a shape. The plain GEMV's config is within 4.3% of the best everywhere (5120 x 1024: 4.57 against
4.38 us; 8224 x 1024: 6.06 against 5.86; the down projection, the LM head and the GEMV + residual: it is
the best). The norm-folded ones were not: four rows per program share the norm's extra loads, in steps of
256 on 2 warps 5.88 -> 4.91 us (5120 x 1024; best 4.68 on 8 rows) and 8.38 -> 6.18 us (8224 x 1024, the
best), gated in steps of 512 7.23 -> 5.80 us (3584 x 1024, the best).
Verdict: adopted in solutions/norm_fusion.py, `fused_gemv_config`: those four-row programs for the norm-folded
GEMVs (79 us less a token by this sweep's times, over the step's 6 + 18 + 24 calls of them); `gemv_config`
(solutions/linear.py) kept. lab/unrolled_gemv_probe.py later moved the gated one to 8 rows in steps of 256 on
4 warps. These configs now hold without PDL only: with it (the default on sm_90+) the decode GEMVs take the
whole-tile `triton_helpers.pdl_gemv_config` (lab/pdl_chain_probe.py).
"""
import json, os, sys, time

from lab import common

dev = "cuda"


def sets_for(N, K, n_up=False, res=False):
    import torch
    bf = torch.bfloat16
    out = []
    for _ in range(common.copies_past_l2(N * K * 2 * (2 if n_up else 1))):
        s = {"x": torch.randn(K, device=dev, dtype=bf), "w": 0.02 * torch.randn(N, K, device=dev, dtype=bf),
             "y": torch.empty(N, device=dev, dtype=bf)}
        if n_up:
            s["u"] = 0.02 * torch.randn(N, K, device=dev, dtype=bf)
        if res:
            s["r"] = torch.randn(N, device=dev, dtype=bf)
        s["nw"] = torch.randn(K, device=dev, dtype=bf) * 0.1
        out.append(s)
    return out


def call_for(lin, fus, lay, kind, N, K, bn, bk, warps):
    import triton
    grid, meta = (triton.cdiv(N, bn),), dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    if kind == "gemv":
        return lambda x, w, y, **_: lin.gemv_kernel[grid](x, w, y, N, K, **meta)
    if kind == "norm_gemv":
        return lambda x, w, y, nw, **_: fus.fused_gemv_kernel[grid](x, nw, w, w, y, N, K, 1e-6, w, w, 0,
                                                                     HAS_NORM=True, GATED=False, **meta)
    if kind == "norm_gate_up":
        return lambda x, w, y, nw, u, **_: fus.fused_gemv_kernel[grid](x, nw, w, u, y, N, K, 1e-6, w, w, 0,
                                                                        HAS_NORM=True, GATED=True, **meta)
    return lambda x, w, y, r, **_: lay.gemv_residual_kernel[grid](x, w, r, y, N, K, **meta)


CASES = [("gemv", 5120, 1024), ("gemv", 8224, 1024), ("gemv", 1024, 3584), ("gemv", 248320, 1024),
         ("norm_gemv", 5120, 1024), ("norm_gemv", 8224, 1024), ("norm_gate_up", 3584, 1024),
         ("gemv_residual", 1024, 2048), ("gemv_residual", 1024, 3584)]


def main(out):
    import triton
    common.setup()
    from tritonllm_course import kernels
    path = common.result_path(out, "gemv_sweep")
    lin, fus = kernels.load("linear", "solutions").module, kernels.load("norm_fusion", "solutions").module
    lay = kernels.load("layer_fusion", "solutions").module
    budget = float(os.environ.get("SWEEP_S", "300"))
    t_start = time.time()
    results = common.header(cases=[])
    for kind, N, K in CASES:
        sets = sets_for(N, K, n_up=kind == "norm_gate_up", res=kind == "gemv_residual")
        nbytes = N * K * 2 * (2 if kind == "norm_gate_up" else 1)
        configs = {"gemv": lin.gemv_config, "gemv_residual": lay.gemv_residual_config}
        hand = configs.get(kind, fus.fused_gemv_config)(N, K)
        rows = []
        space = [(bn, bk, pt) for bn in (1, 2, 4, 8, 16) for bk in (256, 512, 1024, 2048) for pt in (8, 16, 32, 64)]
        for bn, bk, pt in space:
            if bk > max(256, triton.next_power_of_2(K)) or (N == 248320 and bk > 1024):
                continue
            nw = bn * bk // (32 * pt)
            if not 1 <= nw <= 16:
                continue
            if time.time() - t_start > budget:
                break
            try:
                us = common.best_time_calls(call_for(lin, fus, lay, kind, N, K, bn, bk, nw), sets)
                rows.append({"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "us": us, "GBps": nbytes / us / 1e3})
            except Exception as e:
                rows.append({"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "error": str(e)[:100]})
        ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
        hand_row = next((r for r in rows if "us" in r and r["BLOCK_N"] == hand["BLOCK_N"]
                         and r["BLOCK_K"] == hand["BLOCK_K"] and r["num_warps"] == hand["num_warps"]), None)
        case = {"kind": kind, "N": N, "K": K, "bytes": nbytes, "hand": hand, "hand_row": hand_row,
                "best": ok[:8], "all": rows}
        results["cases"].append(case)
        print(kind, N, K, "hand", hand_row, "\n  best", ok[:4], flush=True)
        common.save(path, results)
    plot(str(path))


def plot(path):
    """Per case: every config's GB/s (dots), the hand-picked config (bar) and the best (star)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = json.load(open(path))
    cases = res["cases"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, c in enumerate(cases):
        gb = [r["GBps"] for r in c["all"] if "us" in r]
        ax.scatter([i] * len(gb), gb, s=8, color="0.6", zorder=2)
        if c["hand_row"]:
            ax.bar(i, c["hand_row"]["GBps"], width=0.6, color="tab:blue", alpha=0.6, zorder=1,
                   label="hand-picked (when swept)" if i == 0 else None)
        ax.scatter([i], [c["best"][0]["GBps"]], marker="*", s=120, color="tab:orange", zorder=3,
                   label="best of the sweep" if i == 0 else None)
    ax.set_xticks(range(len(cases)), [f"{c['kind']}\n{c['N']} x {c['K']}" for c in cases], fontsize=8)
    ax.set_ylabel("GB/s (L2 cold)")
    ax.set_title(f"Decode GEMV configs, {res['gpu']}, {res['date']}, bf16 (grey: every config)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.splitext(path)[0] + ".png", dpi=110)


if __name__ == "__main__":
    plot(sys.argv[2]) if sys.argv[1:2] == ["--plot"] else main(common.out_dir())
