"""At the family's larger shapes, does the whole-tile PDL GEMV still beat a GEMV that walks K?

    python -m lab.family_tile_probe [OUTDIR]   (on an sm_90 GPU; writes OUTDIR/family_tile_probe_<gpu>_<date>.json)

Question: on an H200 the fused and fast levels decode Qwen3.5-27B 24% slower than the one-kernel-per-operator
level (17.6 against 14.2 ms a token at 128 cached tokens, results/family_nvidia-h200_2026-12-03/); at 4B and 9B
the fused level is 8% and 5% slower and the fast level 4-7% faster with PDL, at 0.8B the fast level 32% less time. On
sm_90 every level launches the kernels made for PDL, and the fused GEMVs (ln1 + the in-projections, ln2 + gate/up
+ SwiGLU; at the fast level also o_proj and out_proj) hold their whole `[rows, K]` tile
(`triton_helpers.pdl_gemv_config`, measured at 0.8B's K <= 3,584, grids of about one wave). Compiled for sm_90 at
27B's shapes (`tritonllm_course.lowering`, no GPU): K = 5,120 pads to 8,192, the rule takes 2 rows on 16 warps,
47-64 registers a thread leave 2 programs an SM, and the grids run just over 27 and 31 waves of one-shot programs at the
in-projections (7,168 and 8,240 programs), more at gate/up (about 40-80 KB
in flight an SM, against 96-128 KB at 9B); no kernel spills. The operators level walks K in small programs (2 x
512 on 2 warps for 27B's gate/up, 25 an SM). Is the whole tile what loses, and up to which K does it pay?
Method: the decode step at 128 cached tokens (random weights of the real shapes, bf16, its CUDA graph, PDL)
of 4B, 9B and 27B at the fast level with `pdl_gemv_config` capped at K = 16,384 (as it is), 8,192, 4,096
(the rule before the family: 4 rows a program) and 0 (no whole tile: every GEMV walks K, its first tile
loaded before the wait), the fused level as it is and at 0, and the operators level beside them; us per token by CUDA
events over 32 replays, the greedy tokens against the fast level as it is. The cap patches the helper in this
process only.
Result: NVIDIA H100 80GB HBM3, 2026-12-06, 4B and 9B
(lab/results/family_tile_probe_nvidia-h100-80gb-hbm3_2026-12-06.json).
27B did not fit: its random weights (50.1 GiB) and the engine's merged projections (31.0 GiB) need more than the
H100's 80 GB; it needs an H200. At 4B the fast level took 3,317-3,328 us a token at every cap (as it is 3,328;
walking K 3,317), the operators level 3,614 and the fused level 3,689 (3,802 walking K). At 9B: the fast level
5,657 us as it is, 5,667-5,674 at the caps of 8,192 and 4,096, 5,780 walking K (2.2% slower); operators 5,929;
fused 6,166 (6,347 walking K). So on the H100 the fused level loses 2-4% to the operators level at 4B and 9B
as it is (5-7% walking K), the fast level wins by 5-8%, and no cap is faster than the whole tile by more than 0.3%.
Then 27B on an H100 too, once `Engine.random` dropped each layer's projections as it merged them (`own_weights`:
50.1 GiB of weights and one layer's stacked matrix), and 9B again, the same day (at 472037b;
lab/results/family_tile_probe_nvidia-h100-80gb-hbm3_2026-12-06_27b.json and _9b_rerun.json), us a token: 27B fast
19,264 as it was, 19,277 at the cap of 8,192, 18,261 at 4,096 (5.2% faster), 18,259 walking K; operators 18,579;
fused 20,160 (19,744 walking K). 9B fast 5,606 as it was, 5,657 and 5,658 at the caps of 8,192 and 4,096, 5,846
walking K; operators 5,994; fused 6,242 (6,486 walking K). 27B's K are 5,120 and 6,144 (both padded to 8,192
lanes on 2 rows a program) and 17,408 (past PDL_MAX_K, walking already): the cap of 4,096 walks the first two.
9B's widest K below the limit, 12,288, fills three quarters of its 16,384 lanes and gains whole (0.9%).
Verdict: adopted: the whole tile only where K fills at least three quarters of its power-of-two width
(`PDL_MIN_FILL`, tritonllm_course/triton_helpers.py): 27B's 5,120 (five eighths) walks, as do 4B's 2,560 and
9,216 (a tie at 4B); 0.8B's and 9B's K keep it. Measured as adopted (H100, 2026-12-06, at bdaacc4;
lab/results/family_tile_probe_nvidia-h100-80gb-hbm3_2026-12-06_rule.json), us a token: 27B fast 18,561 against
19,276 with the rule before (3.7% less) and 18,246 at the cap of 4,096 (5,120 and 6,144 walking: 1.7% less
again; operators 18,588); 4B fast 3,314 against 3,298 with the rule before (0.5% more), 3,348 walking every K.
Walking 6,144 too (every K of 4,097 to 8,191) would also walk 2B's down projection: timed there (H100,
2026-12-07, at d6adae5, SIZES=qwen3.5-2b; lab/results/family_tile_probe_nvidia-h100-80gb-hbm3_2026-12-07_2b.json),
us a token: 2B fast 1,529 with the rule, 1,538 with 6,144 walking (0.6% more), 1,544 walking every K, 1,536 with
the rule before; operators 1,732; fused 1,907. The rule stays.
"""
import contextlib
import functools
import os

from lab import common
from tritonllm_course import triton_helpers

SIZES = tuple(os.environ.get("SIZES", "qwen3.5-4b qwen3.5-9b qwen3.5-27b").split())   # SIZES="...": some
CAPS = (16384, 8192, 4096, 0)          # the widest K that takes the whole tile; 16,384: as it is
CONTEXT, TOKENS = 128, 32


def capped(max_k: int):
    """`triton_helpers.pdl_gemv_config` returning None (walk K) past `max_k`, for a block; as it was after."""
    original = triton_helpers.pdl_gemv_config

    @functools.wraps(original)
    def config(K):
        return original(K) if K <= max_k else None
    return common.replaced(triton_helpers, "pdl_gemv_config", config)


def rule_before():
    """`triton_helpers.pdl_gemv_config` as it was before PDL_MIN_FILL: the whole tile at every K up to
    PDL_MAX_K, however little of its padded width K fills; as it is after."""
    return common.replaced(triton_helpers, "PDL_MIN_FILL", 0.0)


def check() -> float:
    """The cap and the rule before take effect where the solutions read them (the fused GEMV's and the GEMV +
    residual's PDL configs at 27B's K: 6,144 whole as it is, 5,120 whole only by the rule before) and are undone
    after: 0.0 when so, else 1.0."""
    from tritonllm_course import kernels
    nf = kernels.load("norm_fusion", "solutions").module
    lf = kernels.load("layer_fusion", "solutions").module

    def whole(K):
        cfg = nf.fused_gemv_config(14336, K, norm=True, pdl=True)
        return cfg.get("UNROLL") == K and cfg["BLOCK_K"] == 8192
    before = whole(6144) and not whole(5120)
    with capped(4096):
        during = whole(6144) or lf.gemv_residual_config(5120, 6144, pdl=True)["BLOCK_K"] == 8192
    with rule_before():
        old = whole(5120) and lf.gemv_residual_config(5120, 5120, pdl=True)["BLOCK_K"] == 8192
    after = whole(6144) and not whole(5120)
    return 0.0 if before and not during and old and after else 1.0


def main(out):
    from tritonllm_course.config import get_config
    common.setup()
    res = common.header(check=check(), engine={})
    path = common.result_path(out, "family_tile_probe")
    for size in SIZES:
        config = get_config(size)
        runs = [("operators", None)] + [("fast", cap) for cap in CAPS] + [("fast", "before")] + \
            [("fused", CAPS[0]), ("fused", "before"), ("fused", 0)]
        for level, cap in runs:
            key = f"{size} {level}" + {None: "", "before": " the rule before"}.get(cap, f" whole tile up to K = {cap}")
            try:
                with capped(16384 if cap in (None, "before") else cap), \
                        (rule_before() if cap == "before" else contextlib.nullcontext()):
                    res["engine"][key] = common.fast_decode_us(CONTEXT, TOKENS, config=config, level=level)
            except Exception as e:
                res["engine"][key] = {"error": common.error_text(e)}
            print(key, res["engine"][key].get("us_per_token", res["engine"][key]), flush=True)
            common.save(path, res)
    base = {size: res["engine"].get(f"{size} fast whole tile up to K = 16384", {}).get("tokens") for size in SIZES}
    res["tokens_equal_fast_as_is"] = {k: v.get("tokens") == base[k.split()[0]]
                                      for k, v in res["engine"].items() if "tokens" in v}
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
