"""An attention layer's decode step in one launch or in three, and at which cache rows a step?

    python -m lab.attention_launch_probe [OUTDIR]   (on an sm_90 GPU; writes
                                                     OUTDIR/attention_launch_probe_<gpu>_<date>.json)

Question: under PDL the fast level's attention layer ran three kernels at decode, chapter 22's q/k norm +
RoPE + cache write, FlashDecoding's split kernel and its merge, whose increments added up to ~10 us a layer
at 128 cached tokens against a 0.5 us floor (`pdl_step_profile`, 2026-12-02). `flash_decoding_fused`
(solutions/flash_decoding.py) does all three in one launch: every split normalises and rotates its query
heads itself, the split holding the new row writes k and v into the cache, and the last split of each KV
head to finish (an atomic count) merges. Does the layer get shorter, and which cache rows a step
(`BLOCK_N`: fewer rows, more splits at a short cache, and more partials for the one merging program)?
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16, its CUDA
graph, PDL) at 128 and 4,096 cached tokens: as it is (one launch, `decoding_config`'s 64-row steps), with
the three kernels (`lab.common.three_kernel_attention`), and one launch at 16- and 32-row steps; us per
token by CUDA events over 64 replays, each variant REPEATS times, alternated; the greedy tokens of each against
the engine's as it is.
Result: not measured yet (`python -m lab.attention_launch_probe` on an sm_90 GPU).
Verdict: nothing to adopt before it is measured: the engine keeps solutions/flash_decoding.py's one launch.
"""
from contextlib import nullcontext

import torch
import triton

from lab import common

CONTEXTS = (128, 4096)
REPEATS = 2
VARIANTS = {"one launch": {}, "three kernels": {"three": True},
            "one launch, 16-row steps": {"block_n": 16}, "one launch, 32-row steps": {"block_n": 32}}


def engine_us(variant: dict, context: int, tokens: int = 64) -> dict:
    from tritonllm_course import kernels
    fd = kernels.load("flash_decoding", "solutions").module
    saved = fd.decoding_config
    if "block_n" in variant:
        rows = variant["block_n"]

        def config(max_len, KV, D, element_size, device, interpreted=False):
            cfg = saved(max_len, KV, D, element_size, device, interpreted)
            stages = max(1, min(3, fd.SMEM_BUDGET // (2 * rows * triton.next_power_of_2(D) * element_size)))
            return {**cfg, "BLOCK_N": rows, "num_stages": stages,
                    "num_splits": max(1, min(-(-max_len // rows), cfg["num_splits"]))}
        fd.decoding_config = config
    try:
        with common.three_kernel_attention() if variant.get("three") else nullcontext():
            return common.fast_decode_us(context, tokens)
    finally:
        fd.decoding_config = saved


def check() -> float:
    """The engine's fast level at the tiny config with the one launch and with the three kernels (under the
    interpreter on the CPU, fp32): the fraction of greedy tokens that differ, 0 (the same bits by
    construction)."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    runs = []
    for three in (False, True):
        with common.three_kernel_attention() if three else nullcontext():
            engine = Engine.random(TINY, dtype=dtype, device=device, seed=0, max_seq_len=40, level="fast")
            assert (engine.ops.decode.attention.slot == "flash_decoding.gated") == three
            runs.append(engine.generate(prompt, 6))
    return sum(a != b for a, b in zip(*runs)) / len(runs[0])


def main(out):
    common.setup()
    res = common.header(check_tokens_differing=check(), engine={})
    path = common.result_path(out, "attention_launch_probe")
    for context in CONTEXTS:
        for rep in range(REPEATS):
            for name, variant in VARIANTS.items():
                key = f"{name} @ {context} #{rep}"
                try:
                    res["engine"][key] = engine_us(variant, context)
                except Exception as e:
                    res["engine"][key] = {"error": common.error_text(e)}
                r = res["engine"][key]
                print(key, r.get("us_per_token", r), flush=True)
                common.save(path, res)
    base = {c: res["engine"].get(f"one launch @ {c} #0", {}).get("tokens") for c in CONTEXTS}
    res["tokens_equal_as_is"] = {k: v.get("tokens") == base[int(k.split("@")[1].split("#")[0])]
                                 for k, v in res["engine"].items() if "tokens" in v}
    print("tokens equal:", res["tokens_equal_as_is"], flush=True)
    common.save(path, res)


if __name__ == "__main__":
    main(common.out_dir())
