"""Does folding the decode step's end kernels into their neighbours shorten the step?

    python -m lab.decode_end_probe [OUTDIR]   (on a GPU; writes OUTDIR/decode_end_probe_<gpu>_<date>.json;
                                               PROBE_VARIANTS="as is;both" runs only those, names joined by ";")

Question: after the last layer the fast decode step launches five kernels: the final RMSNorm, the LM head's GEMV,
the argmax's two stages and the advance of the step's counters (position, length, seed). The step's profile on an
H100 (lab/results/pdl_step_profile_nvidia-h100-80gb-hbm3_2026-12-06.json) puts the four small ones at 5.5 us a
token, what folding them could save at most. Two folds need no new kernel: the norm inside the LM head (the
norm-folded GEMV of chapter 21_norm_fusion, which ln1 and ln2 already run at decode, over the 248,320 rows: each
program normalises the 1,024-element token itself) and the counters' advance inside the argmax's merge (its one
program adds 1 to the three counters after storing the token). Does either, or both, shorten the step?
Method: the engine's fast decode step of Qwen3.5-0.8B (random weights of the real shapes, bf16, its CUDA graph,
PDL) at 128 and 4,096 cached tokens, each variant twice, alternated: as it is; "norm in the LM head" (the decode
path's final-norm step runs nothing and its LM head runs `rms_norm_linear` on the stream, launched without the
overlap like the plain LM head, whose 124,160 programs lose under PDL: lab/pdl_variants_probe.py); "advance in
the merge" (the decode path's argmax runs the solution's two stages with `argmax_merge_kernel` edited to advance
the counters, and its advance step runs nothing); both. Only the decode path's steps change: the prompt's
norm and argmax are the same slots, left as they are. Us per token by CUDA events over 64 replays
(`common.fast_decode_us`), the greedy tokens of each against the engine's as it is: the advance moves no
arithmetic; the folded norm rounds differently (the token's normalised values stay fp32 inside the GEMV, where
the separate norm writes them in bf16), so its tokens may part from the others' on random weights.
Result: NVIDIA H100 80GB HBM3, 2026-12-07 (lab/results/decode_end_probe_nvidia-h100-80gb-hbm3_2026-12-07.json, at
06fbf1d), us per token at 128 / 4,096 cached tokens, two runs each: as it is 724.8, 732.7 / 762.8, 764.0; the norm
in the LM head 745.1, 742.7 / 778.9, 780.2; the advance in the merge 725.9, 729.1 / 762.0, 763.2; both 736.5,
735.8 / 779.0, 777.5. The greedy tokens were the same in every run and variant (the folded norm's rounding moved
none here). The check passed on the GPU too (0.0).
Verdict: not adopted: the norm in the LM head makes the step 15-16 us a token slower, where the final norm's own
kernel takes 1.18 us of the graphed step (results/profile_nvidia-h100-80gb-hbm3_2026-12-06.md): every one of the
LM head's 124,160 programs normalises the token again, reading it and the norm's weight. The advance in the merge
is within the runs' spread (as it is moved 7.8 us between its own two runs at 128). The decode step ends as before
(`Forward._decode_step`, tritonllm_course/engine/forward.py); what is left at the step's end is the argmax's
partials, which only a GEMV with more rows a program could fold.
"""
import dataclasses
import functools

import torch

from lab import common
from tritonllm_course.runtime import programmatic_launches

CONTEXTS = (128, 4096)
REPEATS = 2
VARIANTS = {"as is": {}, "norm in the LM head": {"norm": True}, "advance in the merge": {"advance": True},
            "both": {"norm": True, "advance": True}}

LAST_STORE = ('        tl.store(flag_ptr + row, tl.where(x != x, 2, tl.where(tl.abs(x) == float("inf"), 1, 0))'
              '.to(tl.int64))\n')
ADVANCE = ("    if N_STEPS > 0:   # the step's counters, once: nothing after the merge reads them this step\n"
           "        if row == 0:\n"
           "            c = tl.arange(0, 4)\n"
           "            ok = c < N_STEPS\n"
           "            tl.store(steps_ptr + c, tl.load(steps_ptr + c, mask=ok) + 1, mask=ok)\n")


@functools.lru_cache(maxsize=None)
def _modules():
    """The solution modules the variants run: norm_fusion and sampling."""
    from tritonllm_course import kernels
    return tuple(kernels.load(family, "solutions").module for family in ("norm_fusion", "sampling"))


@functools.lru_cache(maxsize=None)
def advancing_merge_kernel():
    """`argmax_merge_kernel` taking the step's counters (steps_ptr, N_STEPS) after vocab and adding 1 to each
    after the flag is stored; N_STEPS = 0 compiles the merge as it is. Nothing else changes."""
    sampling = _modules()[1]
    return common.edited_kernel(sampling.argmax_merge_kernel, [
        ("flag_ptr, vocab,", "flag_ptr, vocab, steps_ptr, N_STEPS: tl.constexpr,"),
        (LAST_STORE, LAST_STORE + ADVANCE)])


class _Advancing:
    """Stands in for `argmax_merge_kernel` in the sampling module while one argmax runs: the solution's launch,
    `kernel[grid](...)`, with the counters appended to its positional arguments."""

    def __init__(self, steps: torch.Tensor):
        self.kernel, self.steps = advancing_merge_kernel(), steps

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args, **kwargs: launch(*args, self.steps, self.steps.numel(), **kwargs)


def _custom(op, label: str, fn):
    """A copy of the op table's entry `op` that runs fn: the decode path's alone (prefill and decode share an
    entry where they run the same slot)."""
    return dataclasses.replace(op, source="custom", label=label, fn=fn)


def folded(engine, variant: dict) -> None:
    """The variant's folds, in the engine's decode path (before its first step, so its graph captures them)."""
    norm_fusion, sampling = _modules()
    op, ctr = engine.ops.decode, engine.counters
    if variant.get("norm"):
        stream, norm_weight, eps = engine._decode_views.x, engine.weights.norm, engine.config.rms_norm_eps

        def head(x, weight, out):                       # x (the final norm's output) is not read: the stream is
            with programmatic_launches(False):
                return norm_fusion.rms_norm_linear(stream, norm_weight, weight, eps, out=out)
        op.final_norm = _custom(op.final_norm, "nothing: the norm is in the LM head", lambda **kwargs: None)
        op.lm_head = _custom(op.lm_head, "rms_norm_linear (final norm + LM head)", head)
    if variant.get("advance"):
        inner = op.argmax.fn

        def argmax(logits, out, flag=None):
            with common.replaced(sampling, "argmax_merge_kernel", _Advancing(ctr.steps)):
                return inner(logits=logits, out=out, flag=flag)
        op.argmax = _custom(op.argmax, "argmax, the merge advancing the counters", argmax)
        op.advance = _custom(op.advance, "nothing: the merge advanced the counters", lambda **kwargs: None)


def engine_us(variant: dict, context: int, tokens: int = 64) -> dict:
    return common.fast_decode_us(context, tokens, setup=lambda engine: folded(engine, variant))


def check() -> float:
    """Under the interpreter (or on the GPU before timing): each variant's greedy tokens on the tiny fast engine
    against the engine as it is, and the advancing merge against torch.argmax on 3 rows of 1,000 logits, its
    counters advanced by exactly 1 (and left alone with N_STEPS = 0). Returns the fraction of differing tokens
    plus the fraction of those merge checks that failed."""
    from tritonllm_course.config import TINY
    from tritonllm_course.engine import Engine
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    runs = {}
    for name, variant in VARIANTS.items():
        engine = Engine.random(TINY, dtype=dtype, device=device, seed=0, max_seq_len=40, level="fast")
        folded(engine, variant)
        runs[name] = engine.generate(prompt, 6)
    base = runs["as is"]
    differing = sum(sum(a != b for a, b in zip(base, r)) for r in runs.values()) / (len(base) * len(runs))
    sampling = _modules()[1]
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(4)).to(device)
    failed = []
    for advance in (True, False):
        steps = torch.tensor([40, 41, 7], dtype=torch.int32, device=device)
        out = torch.full((3,), -1, dtype=torch.int64, device=device)
        stand_in = _Advancing(steps) if advance else _Advancing(steps[:0])
        with common.replaced(sampling, "argmax_merge_kernel", stand_in):
            sampling.argmax(logits, out=out)
        failed.append(not torch.equal(out.cpu(), logits.cpu().argmax(-1)))
        failed.append(steps.cpu().tolist() != ([41, 42, 8] if advance else [40, 41, 7]))
    return differing + sum(failed) / len(failed)


def main(out):
    common.engine_probe(out, "decode_end_probe", VARIANTS, engine_us, CONTEXTS, REPEATS, check)


if __name__ == "__main__":
    main(common.out_dir())
