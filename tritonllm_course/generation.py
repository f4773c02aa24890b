"""Text generation with the model: one prefill of the prompt, then one cached decode step per token.

Also the `tritonllm-course generate` command (`add_generate_parser` and `run_generate`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from . import reference as R
from .config import PRESETS, get_config
from .model import Qwen35Model
from .tokenizer import fallback_tokenizer, load_tokenizer
from .weights import resolve_checkpoint

_DTYPES = ("float32", "float16", "bfloat16")


def _eos_set(eos_token_id) -> set[int]:
    if eos_token_id is None:
        return set()
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(e) for e in eos_token_id}


def check_prompt(model: Qwen35Model, prompt_ids, max_new_tokens: int) -> list[int]:
    """The prompt as a list of ints, after checking ids and lengths; raises ValueError saying what is wrong."""
    ids = [int(i) for i in prompt_ids]
    c = model.config
    if not ids:
        raise ValueError("the prompt is empty: give at least one token")
    bad = [i for i in ids if not 0 <= i < c.vocab_size]
    if bad:
        raise ValueError(f"prompt ids {bad[:5]} are outside the vocabulary [0, {c.vocab_size})")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if len(ids) + max_new_tokens > c.max_position_embeddings:
        raise ValueError(f"a prompt of {len(ids)} tokens plus {max_new_tokens} new tokens exceeds the model's "
                         f"{c.max_position_embeddings} positions (max_position_embeddings)")
    return ids


def check_sampling(temperature, top_k, top_p) -> None:
    """Raise ValueError unless temperature is a finite number >= 0, top_k an int >= 0 and 0 < top_p <= 1.
    The API's check and the command line's alike: written as `not (x >= 0)` so that NaN, which fails
    every comparison, is refused rather than let through to a greedy or garbage decode."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0, got {top_k!r}")
    if not (isinstance(temperature, (int, float)) and temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def generate(model: Qwen35Model, prompt_ids, max_new_tokens: int, *, greedy: bool = True,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, eos_token_id="config",
             seed: int = 0) -> list[int]:
    """Continue `prompt_ids`; returns the new token ids (an end-of-sequence token included, then stop).

    greedy:       argmax (ties to the lowest id); otherwise sample with temperature / top_k / top_p
    eos_token_id: "config" uses the model config's; None never stops early; or an id or list of ids
    seed:         seeds the sampling generator (greedy ignores it)
    """
    ids = check_prompt(model, prompt_ids, max_new_tokens)
    if not greedy:
        check_sampling(temperature, top_k, top_p)
    if max_new_tokens == 0:
        return []
    eos = _eos_set(model.config.eos_token_id if eos_token_id == "config" else eos_token_id)
    generator = None if greedy else torch.Generator(device=model.device).manual_seed(seed)
    cache = model.new_cache(len(ids) + max_new_tokens)
    logits = model(ids, cache)                                    # prefill: [1, vocab]
    out: list[int] = []
    while True:
        if greedy:
            token = int(R.argmax(logits[-1]))
        else:
            token = int(R.sample(logits[-1], temperature, top_k, top_p, generator))
        out.append(token)
        if token in eos or len(out) == max_new_tokens:
            return out
        logits = model([token], cache)                            # decode: one token


# ---------------------------------------------------------------------------------------------------
# the command line

def add_generate_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `generate` subcommand to an argparse `subparsers` object; returns its parser."""
    p = subparsers.add_parser("generate", help="generate tokens with Qwen3.5 (reference model)",
                              description="Prefill a prompt, then decode token by token with the cache.")
    p.add_argument("--model", required=True,
                   help="hub id (e.g. Qwen/Qwen3.5-0.8B), checkpoint directory, or 'random'")
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="prompt text (needs a tokenizer)")
    prompt.add_argument("--prompt-ids", help="prompt token ids, comma-separated: 1,2,3")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--greedy", action="store_true", help="argmax decoding (the default unless sampling "
                   "options are given)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed, and the seed of random weights")
    p.add_argument("--backend", choices=["reference", "triton"], default="reference",
                   help="reference: the plain PyTorch model; triton: the engine from the course's kernels "
                        "(its sampler draws differ from torch's; greedy tokens are the same)")
    p.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false",
                   help="triton backend: launch the decode step op by op instead of replaying a CUDA graph")
    p.add_argument("--level", choices=["operators", "fused", "fast"], default="operators",
                   help="triton backend: the engine's optimisation level (one kernel per operator; fusion + "
                        "split-K; the fewest kernels)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    p.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--config", choices=sorted(PRESETS), default="tiny", help="shapes of --model random")
    p.add_argument("--json", action="store_true", help='print {"prompt_ids": [...], "generated_ids": [...]}')
    p.set_defaults(func=run_generate)
    return p


def _parse_ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise ValueError(f"--prompt-ids must be comma-separated integers, got {text!r}") from None


def _build(args):
    """(model, tokenizer source) for --model."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but no CUDA GPU is available")
    dtype = getattr(torch, args.dtype or ("bfloat16" if device == "cuda" else "float32"))
    if args.model == "random":
        return Qwen35Model.random(get_config(args.config), dtype=dtype, device=device, seed=args.seed), None
    root = resolve_checkpoint(args.model)
    return Qwen35Model.from_pretrained(root, dtype=dtype, device=device), root


def _tokenizer(model, root):
    tok = load_tokenizer(root) if root is not None else fallback_tokenizer("random weights have no tokenizer")
    if tok.vocab_size > model.config.vocab_size:
        raise ValueError(f"the tokenizer's {tok.vocab_size} ids do not fit the model's vocabulary of "
                         f"{model.config.vocab_size}: use --prompt-ids")
    return tok


def _backend(args, model: Qwen35Model, max_seq_len: int):
    """(generate function with `generate`'s signature, label) of --backend."""
    if args.backend == "reference":
        return generate, "reference"
    from .runtime import setup
    setup(quiet=True)                      # the CPU interpreter must be chosen before triton is imported
    from . import kernels
    from .engine import Engine
    try:   # every slot from the source TRITONLLM_KERNELS selects ("auto" when unset), as in the chapters
        engine = Engine.from_model(model, max_seq_len=max_seq_len, cuda_graph=args.cuda_graph, level=args.level)
    except kernels.NotImplementedYet as e:
        where = "" if kernels.has_solutions() else "; this copy has no solutions/ to fall back on"
        raise ValueError(f"{e} (TRITONLLM_KERNELS={kernels.selected()}{where})") from None
    print(kernels.sources_line(engine.ops.sources()), file=sys.stderr)
    for note in engine.ops.fallbacks:   # fused kernels this config's shapes do not fit: plain ones instead
        print(f"level {args.level}: {note}", file=sys.stderr)
    graph = "CUDA graph" if engine.use_graph else "no CUDA graph"
    return (lambda _model, ids, n, **options: engine.generate(ids, n, **options)), f"triton, {args.level} ({graph})"


def run_generate(args) -> int:
    """Run `tritonllm-course generate` with parsed arguments; returns the exit status."""
    try:
        check_sampling(1.0 if args.temperature is None else args.temperature, args.top_k, args.top_p)
        model, root = _build(args)
        tok = None
        if args.prompt is not None:
            tok = _tokenizer(model, root)
            print(f"tokenizer: {tok.label}", file=sys.stderr)
            prompt = tok.encode(args.prompt)
        else:
            prompt = _parse_ids(args.prompt_ids)
        sampling = args.temperature is not None or args.top_k or args.top_p < 1.0
        if args.greedy and sampling:
            raise ValueError("--greedy contradicts --temperature/--top-k/--top-p: choose one")
        prompt = check_prompt(model, prompt, args.max_new_tokens)
        run, backend = _backend(args, model, len(prompt) + args.max_new_tokens)
        t0 = time.perf_counter()
        out = run(model, prompt, args.max_new_tokens, greedy=not sampling,
                  temperature=1.0 if args.temperature is None else args.temperature,
                  top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        seconds = time.perf_counter() - t0
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"tritonllm-course generate: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"prompt_ids": prompt, "generated_ids": out}))
    else:
        print(tok.decode(prompt + out) if tok else f"prompt ids: {prompt}\ngenerated ids: {out}")
    print(f"{len(out)} tokens in {seconds:.2f} s ({len(out) / max(seconds, 1e-9):.1f} tokens/s, "
          f"{backend} backend, {model.device.type}, {str(model.dtype).replace('torch.', '')})", file=sys.stderr)
    return 0
