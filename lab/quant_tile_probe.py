"""The fast level's 8-bit decode GEMVs: the bf16 whole-tile config, or one sized for one-byte weights?

    python -m lab.quant_tile_probe [OUTDIR]    (on a GPU; fp8 needs sm_89+; about 5 minutes on an H200)
    (run on its own: scripts/gpu_extras.sh quant does not run it)

Question: under PDL every decode GEMV of the fast level (the norm-folded in-projections and gate/up, the
GEMV + residual, the gated-norm out-projection) holds its whole [rows, K] weight tile in registers, sized by
`triton_helpers.pdl_gemv_config`: 4 rows a program, about 32 weights a thread. That was measured on bf16
weights (`pdl_chain_probe`), where 32 weights are 64 bytes a thread. With int8 or fp8 weights (chapter
31_weight_quant, `weight_format=`) the same tile is 32 bytes a thread and half the bytes a program, and
the 8-bit step (results/weights_nvidia-h200_2026-12-05.json) saves less than its halved bytes would. Would
more rows or more weights a thread, keeping the bytes a program, serve 8-bit better?
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes quantized to int8,
and to fp8 e4m3 where the GPU has it; bf16 activations; its CUDA graph; PDL) at 128 cached tokens
(`common.fast_decode_us`: us per token by CUDA events over 64 replays, and the greedy tokens of a 16-token
generation), with `pdl_gemv_config` replaced while the engine is built by each of VARIANTS (rows a program,
weights a thread); the bf16 engine first, then each format as it is and its variants, twice in alternation. Every
8-bit GEMV of the step takes the variant (the engine's other kernels read no projection weight); the LM
head keeps its own config (`quant.gemv_config`, `quant_gemv_sweep`). Writes
OUTDIR/quant_tile_probe_<gpu>_<date>.json. `check` confirms the variant reaches the solutions' configs and is
undone after.
Result: NVIDIA H200, 2026-12-05, triton 3.6 (lab/results/quant_tile_probe_nvidia-h200_2026-12-05.json), us per
token in the two rounds: bf16 631 / 630. int8 as it is (4 rows of 32 weights) 526 / 531; 8 x 32 529 / 525;
16 x 32 547 / 547; 4 x 64 552 / 559; 8 x 64 556 / 563; 2 x 64 588 / 588. fp8 as it is 484 / 485; 8 x 32 481 / 483;
8 x 64 493 / 490; 16 x 32 493 / 494; 4 x 64 502 / 505; 2 x 64 572 / 569. Every variant gave its format's tokens
but int8 at 2 x 64 and fp8 at 4 x 64 (other tokens from the 13th and the 7th: another order of the sums at close
logits); no 8-bit engine gave bf16's tokens (random weights: 31_weight_quant's accuracy table).
Verdict: not adopted: the best variant, 8 rows of 32 weights, is within 1% of the tile the engine has, and every
wider tile is slower. The 8-bit step's time above its floor is not in the GEMV's tile:
tritonllm_course/triton_helpers.py keeps one tile for every weight format.
"""
import contextlib
import functools

import torch
import triton

from lab import common
from tritonllm_course import triton_helpers

# (rows a program, weights a thread): as it is, then the same bytes a program, then the same bytes a thread
VARIANTS = {"as it is": None, "8 rows x 32": (8, 32), "4 rows x 64": (4, 64), "8 rows x 64": (8, 64),
            "16 rows x 32": (16, 32), "2 rows x 64": (2, 64)}
CONTEXT, TOKENS, REPEATS = 128, 64, 2


def tile(variant):
    """`triton_helpers.pdl_gemv_config` giving `variant` = (rows, weights a thread) wherever K fits 16 warps of
    it (else as it is), for a block; as it was after. None: unchanged."""
    original = triton_helpers.pdl_gemv_config
    if variant is None:
        return contextlib.nullcontext()
    rows, per_thread = variant

    @functools.wraps(original)
    def config(K):
        block_k = max(16, triton.next_power_of_2(K))
        warps = rows * block_k // (32 * per_thread)
        if K > triton_helpers.PDL_MAX_K or not 1 <= warps <= triton_helpers.PDL_WARPS:
            return original(K)
        return {"BLOCK_N": rows, "BLOCK_K": block_k, "num_warps": triton.next_power_of_2(warps)}
    return common.replaced(triton_helpers, "pdl_gemv_config", config)


def check() -> float:
    """A variant reaches the solutions' PDL configs (the fused GEMV's, the GEMV + residual's) at the decode
    shapes and is undone after: 0.0 when so, else 1.0."""
    from tritonllm_course import kernels
    nf = kernels.load("norm_fusion", "solutions").module
    lf = kernels.load("layer_fusion", "solutions").module
    before = nf.fused_gemv_config(8224, 1024, norm=True, pdl=True)
    with tile((8, 64)):
        during = (nf.fused_gemv_config(8224, 1024, norm=True, pdl=True)["BLOCK_N"] == 8
                  and lf.gemv_residual_config(1024, 3584, pdl=True)["num_warps"] == 16)
    after = nf.fused_gemv_config(8224, 1024, norm=True, pdl=True)
    return 0.0 if during and before == after and before["BLOCK_N"] == triton_helpers.PDL_ROWS else 1.0


def main(out):
    from tritonllm_course.triton_helpers import FP8_CAPABILITY
    common.setup()
    major, minor = torch.cuda.get_device_capability()
    formats = ["int8"] + (["fp8"] if 10 * major + minor >= FP8_CAPABILITY else [])
    res = common.header(check=check(), context=CONTEXT, engine={})
    path = common.result_path(out, "quant_tile_probe")
    runs = {"bf16 as it is": ("native", None)}
    runs.update({f"{fmt} {name}": (fmt, v) for fmt in formats for name, v in VARIANTS.items()})

    def engine_us(run, context):
        fmt, variant = run
        with tile(variant):
            return common.fast_decode_us(context, TOKENS, weight_format=fmt)
    same = common.engine_variants(res, path, runs, engine_us, (CONTEXT,), REPEATS, "bf16 as it is")
    for fmt in formats:     # each format's tokens against its own first run as it is
        base = res["engine"].get(f"{fmt} as it is @ {CONTEXT} #0", {}).get("tokens")
        res.setdefault("same_tokens_as_format_as_it_is", {}).update(
            {k: v.get("tokens") == base for k, v in res["engine"].items() if k.startswith(fmt) and "tokens" in v})
    res["same_tokens_as_bf16"] = same
    common.save(path, res)
    return res


if __name__ == "__main__":
    main(common.out_dir())
