"""Which of the decode step's kernels lose under PDL, and what wins it back?

    python -m lab.pdl_variants_probe [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/pdl_variants_probe_<gpu>_<date>.json)

Question: `pdl_step_profile` attributes the PDL decode step's time kernel by kernel. Two slots lose under
PDL: the LM head (248,320 x 1024 at chapter 05_projections's tile of 2 rows: 124,160 programs, each running the
trigger and the wait) and the recurrence (its state loaded before the wait). Is the LM head's loss the cost
of the PDL calls at its tile, and which tile or launch wins it back? Do the recurrence's state load and
trigger sit where they should, and do the 1024-row out-projections want other tiles under the overlap?
Method: (1) the LM head's GEMV (solutions/linear.py `gemv_kernel`) alone, after a one-program kernel, both
replayed from a CUDA graph over weight copies past L2, at several (rows, BLOCK_K, warps): without PDL, with
the PDL code but no overlap, with PDL. (2) The engine's fast decode step (random weights of the real
shapes, bf16, its CUDA graph) at 128 and 4,096 cached tokens: as it is (the LM head launched without PDL);
the LM head with PDL, at chapter 05_projections's tile and at the best PDL tile of (1); the 1024-row out-projections
(o_proj, out_proj, down, the residual in their epilogue) at 2 and 8 rows a program. Us per token by CUDA
events over 64 replays; each variant's greedy tokens against the engine's as it is.
Result: NVIDIA H200, 2026-12-02 (lab/results/pdl_variants_probe_nvidia-h200_2026-12-02.json). (1) The
LM head alone: chapter 05_projections's tile (2 rows, BLOCK_K 512, 2 warps) 114.7 us without the PDL calls, 152.2
with them, overlapping or not; every other tile is as fast with them as without, and slower than 114.7:
16 x 512 on 4 warps 131.6, 4 x 1024 on 4 137.5, 8-32 rows 161-179 us. (2) The engine, us per token at 128
/ 4,096 cached tokens: as it is 625.0 / 653.7; the LM head with PDL 661.6 / 688.3, at the best PDL tile
639.8 / 668.3; the out-projections at 2 rows 645.1 / 662.1 (greedy tokens changed: another reduction
layout), at 8 rows 652.0 / 677.9; every other variant's tokens equal the engine's. The same run measured
two placements in the recurrence through switches then in solutions/layer_fusion.py, removed since, as
neither was adopted: its state loaded after the wait 635.5 / 667.4 (10-14 us slower than as it is); its trigger
after its stores 622.2 / 644.7 (at its exit 625.3 / 651.3), within the runs' spread of the kernel as it is.
Verdict: adopted: the LM head launches without PDL (solutions/linear.py, `PDL_MAX_PROGRAMS`: a GEMV of
more programs than that launches plainly), 37 us a token (35 at 4,096); the recurrence keeps its state before the wait
and its trigger at entry; the out-projections keep 4 rows.
"""
import torch
import triton
import triton.language as tl

from lab import common
from tritonllm_course.engine.graph import capture

VOCAB, HIDDEN = 248320, 1024
TILES = [(2, 512, 2), (4, 1024, 4), (8, 1024, 8), (16, 1024, 8), (16, 512, 4), (32, 1024, 16), (8, 512, 4)]


@triton.jit
def one_program(y_ptr):
    # a predecessor for the GEMV: its dependents may launch at once
    tl.store(y_ptr, 1.0)


def lm_head_us(tile, pdl: bool, overlap: bool) -> float:
    from tritonllm_course import kernels
    lin = kernels.load("linear", "solutions").module
    rows, block_k, warps = tile
    copies = 3                                              # 3 x 508 MB: past the 50 MB L2
    ws = [0.02 * torch.randn(VOCAB, HIDDEN, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(VOCAB, device="cuda", dtype=torch.bfloat16)
    flag = torch.zeros(1, device="cuda")
    grid = (triton.cdiv(VOCAB, rows),)

    def run():
        for w in ws:
            one_program[(1,)](flag)
            lin.gemv_kernel[grid](x, w, y, VOCAB, HIDDEN, BLOCK_N=rows, BLOCK_K=block_k, num_warps=warps,
                                  PDL=pdl, launch_pdl=pdl and overlap)
    run()
    ok = torch.allclose(y.float(), (ws[-1].float() @ x.float()), rtol=2e-2, atol=2e-2)
    us = _graph_us(run) / copies
    del ws
    torch.cuda.empty_cache()
    return us if ok else float("nan")


def _graph_us(fn, replays: int = 20) -> float:
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
        capture(g, fn)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / replays)
    return best


def engine_us(variant: dict, context: int, tokens: int = 64) -> dict:
    from tritonllm_course import kernels
    lf = kernels.load("layer_fusion", "solutions").module
    lin = kernels.load("linear", "solutions").module
    saved = lin.PDL_MAX_PROGRAMS, lin.gemv_config, lf.gemv_residual_config
    try:
        if "narrow_rows" in variant:            # the 1024-row out-projections' whole tiles at other heights
            rows, base_cfg = variant["narrow_rows"], saved[2]

            def narrow(N, K, interpreted=False, pdl=False):
                cfg = base_cfg(N, K, interpreted, pdl)
                if pdl and N == HIDDEN and cfg["UNROLL"]:
                    cfg = {**cfg, "BLOCK_N": rows, "num_warps": max(1, min(16, rows * cfg["BLOCK_K"] // 1024))}
                return cfg
            lf.gemv_residual_config = narrow
        if variant.get("lm_head_pdl"):
            lin.PDL_MAX_PROGRAMS = 1 << 30
        if "lm_head_tile" in variant:
            rows, block_k, warps = variant["lm_head_tile"]
            base = saved[1]
            lin.gemv_config = lambda N, K, interpreted=False: (
                {"BLOCK_N": rows, "BLOCK_K": block_k, "num_warps": warps} if N == VOCAB else base(N, K, interpreted))
        return common.fast_decode_us(context, tokens)
    finally:
        lin.PDL_MAX_PROGRAMS, lin.gemv_config, lf.gemv_residual_config = saved


def check() -> float:
    """The LM head's GEMV with the PDL calls equals the one without, at an odd shape (runs anywhere; under
    the interpreter the PDL calls are no-ops)."""
    from tritonllm_course import kernels
    lin = kernels.load("linear", "solutions").module
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    n, k = 37, 129
    w, x = torch.randn(n, k, generator=gen).to(device), torch.randn(k, generator=gen).to(device)
    worst = 0.0
    for pdl in (False, True):
        y = torch.full((n,), float("nan"), device=device)
        lin.gemv_kernel[(triton.cdiv(n, 4),)](x, w, y, n, k, BLOCK_N=4, BLOCK_K=32, num_warps=1, PDL=pdl)
        worst = max(worst, common.rel_err(y.cpu(), (w.double() @ x.double()).cpu()))
    return worst


def main(out):
    common.setup()
    res = common.header(lm_head={}, engine={})
    path = common.result_path(out, "pdl_variants_probe")
    for tile in TILES:
        for pdl, overlap in ((False, False), (True, False), (True, True)):
            mode = "pdl" if overlap else ("pdl_no_overlap" if pdl else "plain")
            key = f"rows{tile[0]}_k{tile[1]}_w{tile[2]}_{mode}"
            try:
                res["lm_head"][key] = lm_head_us(tile, pdl, overlap)
            except Exception as e:
                res["lm_head"][key] = common.error_text(e)
            print(key, res["lm_head"][key], flush=True)
            common.save(path, res)
    pdl_times = {t: res["lm_head"].get(f"rows{t[0]}_k{t[1]}_w{t[2]}_pdl") for t in TILES}
    best = min((t for t in TILES if isinstance(pdl_times[t], float)), key=lambda t: pdl_times[t], default=None)
    res["best_pdl_tile"] = best
    variants = {"as is": {}, "LM head with PDL": {"lm_head_pdl": True},
                "out-projections at 2 rows": {"narrow_rows": 2}, "out-projections at 8 rows": {"narrow_rows": 8}}
    if best is not None:
        variants["LM head with PDL at the best PDL tile"] = {"lm_head_tile": best, "lm_head_pdl": True}
    for context in (128, 4096):
        for name, variant in variants.items():
            key = f"{name} @ {context}"
            try:
                res["engine"][key] = engine_us(variant, context)
            except Exception as e:
                res["engine"][key] = {"error": common.error_text(e)}
            r = res["engine"][key]
            print(key, r.get("us_per_token", r), flush=True)
            common.save(path, res)
    base = {c: res["engine"].get(f"as is @ {c}", {}).get("tokens") for c in (128, 4096)}
    res["tokens_equal_as_is"] = {k: v.get("tokens") == base[int(k.rsplit("@", 1)[1])]
                                 for k, v in res["engine"].items() if "tokens" in v}
    print("tokens equal:", res["tokens_equal_as_is"], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
