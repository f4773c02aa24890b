"""Do thread-block clusters (Triton's `num_ctas`) close the 128-token GEMM + residual's gap to cuBLAS?

    python -m lab.gemm_clusters_probe [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/gemm_clusters_probe_<gpu>_<date>.json)

Question: at 128 tokens the GEMM + residual of the output projections trails `torch.addmm`, and Nsight Compute
finds both latency-bound, cuBLAS's kernel launched in clusters of 8 programs that can share one load of x
(`lab/prompt_gemm_ncu_probe.py`); the course's kernel runs without clusters. Triton launches a `tl` kernel in
clusters of `num_ctas` programs on sm_90. Does that, at the tiles the course tried, make the kernel faster?
Method: `gemm_residual_kernel` (solutions/layer_fusion.py) at M = 128 for o_proj / out_proj (N = 1,024, K =
2,048) and down (K = 3,584), bf16: the engine's launch (`linear_residual`, its config's pick) and `torch.addmm`
on the same operands, then the kernel at four tiles (BLOCK_M x BLOCK_N x BLOCK_K, warps, stages: 64 x 16 x 256, 4,
3 (the engine's pick at 128 tokens); 64 x 32 x 128, 4, 4; 128 x 32 x 128, 4, 3; 128 x 64 x 64, 4, 3), each with
num_ctas 1, 2 and 4. Each timed as the course times (`common.best_time_calls`: CUDA graphs over copies of the
operands past L2), its output compared with the fp32 product plus the residual (max error over the max).
Result: NVIDIA H100 80GB HBM3, 2026-12-07 (lab/results/gemm_clusters_probe_nvidia-h100-80gb-hbm3_2026-12-07.json:
the printed table of this probe's first form at 06fbf1d, written into that file by hand in the layout `main`
writes), us at K = 2,048 / 3,584: the engine's launch 7.10 / 10.70 and the same tile launched here without clusters
7.43 / 10.66 (one kernel and config, so about 5% is this run's spread), `torch.addmm` 7.96 / 9.67. With num_ctas 1,
2 and 4: the engine's tile 7.43, 9.06, 19.20 / 10.66, 13.24, 29.83; 64 x 32 x 128 7.86, 7.16, 11.57 / 11.48, 10.25,
17.58; 128 x 32 x 128 11.56, 9.49, 9.25 / 17.41, 14.46, 13.94; 128 x 64 x 64 17.52, 15.10, 13.49 / 28.66, 24.66,
22.27. Every tile's output within 2.5e-3 of the fp32 product. Clusters help the tiles that were slow alone, and the
engine's own tile is slower in every cluster; the fastest clustered launch, 64 x 32 x 128 in pairs, is within the
run's spread of the engine's launch at both K and behind cuBLAS at K = 3,584.
Verdict: not adopted: `gemm_residual_config` (solutions/layer_fusion.py) keeps its tile without clusters. Triton's
`tl` has no multicast load on sm_90, so a cluster's programs still load x each for itself: what cuBLAS's clusters
share, theirs do not.
"""
import torch
import triton

from lab import common

M = 128
SHAPES = ((1024, 2048), (1024, 3584))                       # (N, K): o_proj / out_proj, down
TILES = ((64, 16, 256, 4, 3), (64, 32, 128, 4, 4), (128, 32, 128, 4, 3), (128, 64, 64, 4, 3))
CTAS = (1, 2, 4)


def _layer_fusion():
    from tritonllm_course import kernels
    return kernels.load("layer_fusion", "solutions").module


def launch(x, w, res, y, tile, ctas):
    """`gemm_residual_kernel` at one tile (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) in clusters of `ctas`."""
    bm, bn, bk, warps, stages = tile
    m, k = x.shape
    n = w.shape[0]
    _layer_fusion().gemm_residual_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        x, w, res, y, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
        num_ctas=ctas)


def _operands(m, n, k, dtype, device, gen):
    return {"x": torch.randn(m, k, generator=gen).to(device, dtype),
            "w": (0.02 * torch.randn(n, k, generator=gen)).to(device, dtype),
            "res": torch.randn(m, n, generator=gen).to(device, dtype),
            "y": torch.full((m, n), float("nan"), device=device, dtype=dtype)}


def _error(o) -> float:
    want = o["res"].double() + o["x"].double() @ o["w"].double().T
    return ((o["y"].double() - want).abs().max() / want.abs().max()).item()


def check() -> float:
    """Every tile (num_ctas 1 where clusters do not exist, under the interpreter) at M = 37, N = 50, K = 300 in fp32,
    the output NaN-poisoned first: the largest error against the fp64 product plus the residual."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for tile in TILES:
        o = _operands(37, 50, 300, torch.float32, device, gen)
        launch(o["x"], o["w"], o["res"], o["y"], tile, 1)
        worst = max(worst, _error(o))
    return worst


def main(out):
    common.setup()
    path = common.result_path(out, "gemm_clusters_probe")
    res = common.header(check=check(), M=M, rows=[])
    layer = _layer_fusion()
    gen = torch.Generator().manual_seed(1)
    for n, k in SHAPES:
        sets = [_operands(M, n, k, torch.bfloat16, "cuda", gen) for _ in range(common.copies_past_l2(n * k * 2))]
        timed = {"engine": lambda x, w, res, y: layer.linear_residual(x, w, res, out=y),
                 "torch.addmm": lambda x, w, res, y: torch.addmm(res, x, w.T, out=y)}
        for tile in TILES:
            for ctas in CTAS:
                timed[f"{tile} ctas {ctas}"] = lambda x, w, res, y, t=tile, c=ctas: launch(x, w, res, y, t, c)
        for name, call in timed.items():
            row = {"N": n, "K": k, "form": name}
            try:
                row["us"] = common.best_time_calls(call, sets)
                call(**sets[0])
                row["rel_err"] = _error(sets[0])
            except Exception as e:
                row["error"] = common.error_text(e)
            common.keep_row(res, path, row)
    return res


if __name__ == "__main__":
    main(common.out_dir())
