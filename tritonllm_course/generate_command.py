"""The `tritonllm-course generate` command: a prompt (text or ids) through the reference model's generation
loop (`generation.stream`) or through the engine (`--backend triton`), the new tokens printed.

A module of its own, above the engine: the reference generation loop it shares with the chapters sits below
the engine, which imports the same argument checks (`validate`); only the command picks between the two.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from .config import PRESETS, get_config
from .generation import check_prompt, stream
from .model import Qwen35Model
from .tokenizer import fallback_tokenizer, load_tokenizer
from .validate import WEIGHT_FORMATS, check_sampling, check_seed, check_weight_format
from .weights import resolve_checkpoint

_DTYPES = ("float32", "float16", "bfloat16")


def add_generate_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `generate` subcommand to an argparse `subparsers` object; returns its parser."""
    p = subparsers.add_parser("generate",
                              help="generate tokens with Qwen3.5 (reference model, or the engine: --backend triton)",
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
    p.add_argument("--level", choices=["operators", "fused", "fast"], default=None,
                   help="triton backend: the engine's optimisation level (one kernel per operator, the default; "
                        "fusion + split-K; the fewest kernels)")
    p.add_argument("--weights", default="native", metavar="FORMAT",
                   help=f"triton backend: the projections' weights, one of {', '.join(WEIGHT_FORMATS)}: the "
                   "model's dtype (native, default), or quantized to 8 bits at load (chapter 31_weight_quant)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    p.add_argument("--dtype", choices=_DTYPES, default=None,
                   help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--config", choices=sorted(PRESETS), default="tiny", help="shapes of --model random")
    p.add_argument("--json", action="store_true", help='print {"prompt_ids": [...], "generated_ids": [...]}')
    p.set_defaults(func=run_generate)
    return p


def _parse_ids(text: str) -> list[int]:
    """"5,17,42" -> [5, 17, 42]; an empty item ("5,,17", a trailing comma) is refused, not dropped."""
    try:
        return [int(t) for t in text.replace(" ", "").split(",")]
    except ValueError:
        raise ValueError(f"--prompt-ids must be comma-separated integers, got {text!r}") from None


def _build(args):
    """(model, tokenizer source) for --model."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda, but no CUDA GPU is available")
    dtype = getattr(torch, args.dtype or ("bfloat16" if device == "cuda" else "float32"))
    if not args.model.strip():      # Path("") is the current directory: it would be searched for config.json
        raise ValueError("--model is empty: give a hub id (e.g. Qwen/Qwen3.5-0.8B), a checkpoint directory or "
                         "'random'")
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
    """(stream function with `stream`'s signature, label) of --backend."""
    if args.backend == "reference":
        return stream, "reference"
    # imported here, not above: the CPU interpreter must be chosen before triton is imported, and the
    # reference backend never imports it
    from .runtime import setup
    setup(quiet=True)
    from . import kernels
    from .engine import Engine
    try:   # every slot from the source TRITONLLM_KERNELS selects ("auto" when unset), as in the chapters
        engine = Engine.from_model(model, max_seq_len=max_seq_len, cuda_graph=args.cuda_graph, level=args.level,
                                   weight_format=args.weights)
    except kernels.NotImplementedYet as e:
        where = "" if kernels.has_solutions() else "; this copy has no solutions/ to fall back on"
        raise ValueError(f"{e} (TRITONLLM_KERNELS={kernels.selected()}{where})") from None
    print(kernels.sources_line(engine.ops.sources()), file=sys.stderr)
    for note in engine.plan.fallbacks:   # fused kernels this config's shapes do not fit: plain ones instead
        print(f"level {args.level}: {note}", file=sys.stderr)
    graph = "CUDA graph" if engine.use_graph else "no CUDA graph"
    weights = "" if args.weights == "native" else f", {args.weights} weights"
    return ((lambda _model, ids, n, **options: engine.stream(ids, n, **options)),
            f"triton, {args.level} ({graph}{weights})")


def _check_engine_options(args) -> None:
    """The engine's options (--level, --no-cuda-graph, --weights) against --backend, and --weights against the
    level and the GPU, before the model loads (a ValueError: exit 2). Sets the default level."""
    for option, given in (("--level", args.level is not None), ("--no-cuda-graph", not args.cuda_graph)):
        if given and args.backend != "triton":     # the reference model has no levels or graphs: not silently
            raise ValueError(f"{option} runs on the engine: add --backend triton")
    args.level = args.level or "operators"
    if check_weight_format(args.weights, "--weights") == "native":
        return
    if args.backend != "triton":
        raise ValueError(f"--weights {args.weights} runs on the engine: add --backend triton")
    from .runtime import setup        # triton after the interpreter is chosen, as in `_backend`
    setup(quiet=True)
    from .engine.merged import check_fp8
    from .engine.plan import check_weight_format as check_level
    check_level(args.level, args.weights, "--weights")
    check_fp8(args.weights, torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")))


def _text_arg(text: str, name: str) -> str:
    """A command-line string that must be text: argv bytes that are not UTF-8 reach Python as surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid UTF-8 text: give the prompt in UTF-8 (or token ids with "
                         "--prompt-ids)") from None
    return text


def _print_tokens(args, tok, prompt, out) -> None:
    if args.json:
        print(json.dumps({"prompt_ids": prompt, "generated_ids": out}))
    else:
        print(tok.decode(prompt + out) if tok else f"prompt ids: {prompt}\ngenerated ids: {out}")


def run_generate(args) -> int:
    """Run `tritonllm-course generate` with parsed arguments; returns the exit status: 0, 2 for bad input
    (one line naming it), 130 on Ctrl-C (the tokens made so far printed, no traceback)."""
    prompt, out, tok, started = None, [], None, False
    try:
        check_sampling(1.0 if args.temperature is None else args.temperature, args.top_k, args.top_p)
        check_seed(args.seed, "--seed")
        if args.prompt is not None:
            _text_arg(args.prompt, "--prompt")
        _check_engine_options(args)
        model, root = _build(args)
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
        tokens = run(model, prompt, args.max_new_tokens, greedy=not sampling,
                     temperature=1.0 if args.temperature is None else args.temperature,
                     top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        started = True
        for token in tokens:
            out.append(token)
        seconds = time.perf_counter() - t0
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"tritonllm-course generate: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:       # Ctrl-C: what was generated is kept, the rest of the run abandoned
        if started:
            _print_tokens(args, tok, prompt, out)
        print(f"tritonllm-course generate: interrupted after {len(out)} new tokens", file=sys.stderr)
        return 130
    _print_tokens(args, tok, prompt, out)
    print(f"{len(out)} tokens in {seconds:.2f} s ({len(out) / max(seconds, 1e-9):.1f} tokens/s, "
          f"{backend} backend, {model.device.type}, {str(model.dtype).replace('torch.', '')})", file=sys.stderr)
    return 0
