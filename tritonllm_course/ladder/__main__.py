"""The ladder on a GPU: every step of chapter 29_naive_to_fast timed at Qwen3.5-0.8B's real shapes, and checked.

    python -m tritonllm_course.ladder --out results/      # writes results/ladder_<gpu>_<date>.{json,md,png}

bf16, random weights of the real shapes, batch 1, greedy. Prefill: a 128-token prompt, time to the first
token. Decode: mean time per token after it: a step with a KV cache generates 32 tokens, 3 runs, medians;
a step without one generates 2 tokens once (its decode step runs all 129 tokens again, seconds on the naive
steps). Every step is warmed up first (compiles, captures). Then each step runs again in fp32 on weights five
times transformers' initialisation, 4 tokens after an 8-token prompt, its tokens against the reference model's.
The steps run from the fastest to the naive one; a step not begun within --budget-s is skipped (its row
says so). The files are rewritten after every step, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import sys


def add_args(ap) -> None:
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=32, help="tokens per run of a step with a KV cache")
    ap.add_argument("--uncached-tokens", type=int, default=2, help="tokens of the one run of a step without one")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", nargs="+", default=None, metavar="STEP", help="a subset of the steps, by key")
    ap.add_argument("--no-check", action="store_true", help="skip the fp32 token check")
    ap.add_argument("--budget-s", type=float, default=210.0, help="begin no step after this many seconds")
    ap.add_argument("--seed", type=int, default=0)


def check_args(args) -> None:
    """The options as `climb` takes them, a ValueError naming the first it cannot run (`gpu_script` says it
    before the GPU's test): --budget-s above 0 (a negative one skipped every step, NaN never ran out), --seed
    as every seed of the course, each of --steps a step's key."""
    from ..validate import check_seed
    from .rungs import check_climb_args, rung_named
    check_climb_args(args.prompt_len, args.tokens, args.uncached_tokens, args.repeats)
    if not args.budget_s > 0:
        raise ValueError(f"--budget-s must be above 0, got {args.budget_s}")
    check_seed(args.seed, "--seed")
    try:
        for key in args.steps or ():
            rung_named(key)
    except KeyError as e:     # its message, without the quotes str() gives a KeyError
        raise ValueError(f"--steps: {e.args[0]}") from None


def main(argv=None) -> int:
    from ..measure.benchmark import gpu_script, results_stem
    started = gpu_script(__doc__, argv, add_args, check=check_args)
    if started is None:
        return 1
    args, rt = started
    from . import RUNGS, measure, results, rung_named
    steps = RUNGS if args.steps is None else tuple(rung_named(k) for k in args.steps)
    stem, _ = results_stem(args.out, results.NAME)
    res = measure("qwen3.5-0.8b", rt.dtype, "cuda", steps=steps, prompt_len=args.prompt_len, tokens=args.tokens,
                  uncached_tokens=args.uncached_tokens, repeats=args.repeats, check=not args.no_check,
                  fastest_first=True, budget_s=args.budget_s, seed=args.seed, stem=stem)
    print(results.markdown(res))
    print(f"written: {stem}.{{json,md,png}}", file=sys.stderr)
    failed = [r["key"] for r in res["steps"] if r["error"] or r["check_error"] or r["identical"] is False]
    if failed:
        print(f"steps failed, skipped or with other tokens: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
