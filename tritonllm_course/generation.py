"""Text generation with the model: one prefill of the prompt, then one cached decode step per token.

Also the `tritonllm-course generate` command (`add_generate_parser` and `run_generate`).
"""
from __future__ import annotations

import argparse
import json
import math
import operator
import sys
import time
from typing import Iterator

import torch

from . import reference as R
from .config import PRESETS, get_config
from .model import Qwen35Model
from .tokenizer import fallback_tokenizer, load_tokenizer
from .weights import resolve_checkpoint

_DTYPES = ("float32", "float16", "bfloat16")


MIN_TEMPERATURE = 1e-6   # below it logits / temperature leaves float32's range for logits of ~3e32, and a draw
                         # is the argmax for any gap between the two largest logits above ~1e-4
MIN_TOP_P = 2.0 ** -126  # float32's smallest normal number: a smaller top_p reaches the samplers as 0, which
                         # keeps nothing (the reference compares in fp32, the kernels take an fp32 argument)
MAX_SEED = 2**63 - 1     # torch.Generator.manual_seed takes a 64-bit seed


def _index(value):
    """`value` as an int when it is one (a Python or numpy int, a 0-d int tensor), else None; bool is not."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_count(value, name: str) -> int:
    """`value` as an int >= 0, else a TypeError / ValueError naming `name` (max_new_tokens, max_seq_len...)."""
    n = _index(value)
    if n is None:
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return n


def check_seed(seed, name: str = "seed") -> int:
    """`seed` as an int in [0, MAX_SEED], else a TypeError / ValueError naming `name`."""
    n = _index(seed)
    if n is None:
        raise TypeError(f"{name} must be an int, got {seed!r} ({type(seed).__name__})")
    if not 0 <= n <= MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**63 - 1], got {n}")
    return n


def check_ids(ids, name: str = "prompt_ids", device=None) -> list[int]:
    """Token ids as a list of ints: a list or tuple of ints, or a 1-D int tensor on the CPU or on `device`.
    A batch (2-D), floats, bools and strings raise TypeError / ValueError naming `name`: each would
    otherwise be read as some other sequence (flattened, truncated, split into characters)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be token ids (a list of ints or a 1-D int tensor), got a "
                        f"{type(ids).__name__}: encode text with a tokenizer first")
    if isinstance(ids, torch.Tensor):
        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
            raise TypeError(f"{name} must hold integer token ids, got a {str(ids.dtype).replace('torch.', '')} "
                            "tensor")
        if ids.dim() != 1:
            raise ValueError(f"{name} must be one sequence (a 1-D tensor), got shape {list(ids.shape)}: "
                             "run the prompts of a batch one at a time")
        if ids.device.type != "cpu" and (device is None or ids.device != torch.device(device)):
            other = device is not None and torch.device(device).type != "cpu"
            where = "on the cpu" + (f" or on {device}" if other else "")
            raise ValueError(f"{name} is on {ids.device}; give it {where}")
        return ids.tolist()
    try:
        items = list(ids)
    except TypeError:
        raise TypeError(f"{name} must be token ids (a list of ints or a 1-D int tensor), got "
                        f"{type(ids).__name__}") from None
    out = []
    for i, item in enumerate(items):
        n = _index(item)
        if n is None:
            shape = " (a nested list: run the prompts of a batch one at a time)" if isinstance(
                item, (list, tuple)) or getattr(item, "ndim", 0) else ""
            raise TypeError(f"{name}[{i}] must be an int token id, got {item!r} ({type(item).__name__}){shape}")
        out.append(n)
    return out


def eos_set(eos_token_id, name: str = "eos_token_id") -> set[int]:
    """The end-of-sequence ids: None -> none; an int; or a list/tuple/set of ints. Anything else (a
    string, which would stop at each of its characters' digits, a float, a bool) raises naming `name`."""
    if eos_token_id is None:
        return set()
    one = _index(eos_token_id)
    if one is not None:
        return {one}
    if isinstance(eos_token_id, (list, tuple, set, frozenset)):
        ids = [_index(e) for e in eos_token_id]
        if None not in ids:
            return set(ids)
    raise TypeError(f"{name} must be a token id (int), a list of them, None or 'config', got {eos_token_id!r}")


def check_prompt(model: Qwen35Model, prompt_ids, max_new_tokens: int) -> list[int]:
    """The prompt as a list of ints, after checking ids and lengths; raises ValueError saying what is wrong."""
    ids = check_ids(prompt_ids, device=model.device)
    max_new_tokens = check_count(max_new_tokens, "max_new_tokens")
    c = model.config
    if not ids:
        raise ValueError("the prompt is empty: give at least one token")
    bad = [i for i in ids if not 0 <= i < c.vocab_size]
    if bad:
        raise ValueError(f"prompt ids {bad[:5]} are outside the vocabulary [0, {c.vocab_size})")
    if len(ids) + max_new_tokens > c.max_position_embeddings:
        raise ValueError(f"a prompt of {len(ids)} tokens plus {max_new_tokens} new tokens exceeds the model's "
                         f"{c.max_position_embeddings} positions (max_position_embeddings)")
    return ids


def check_sampling(temperature, top_k, top_p) -> None:
    """Raise ValueError unless temperature is 0 (greedy) or a finite number >= MIN_TEMPERATURE, top_k an
    int >= 0 and MIN_TOP_P <= top_p <= 1. The API's check and the command line's alike: written as
    `not (x >= 0)` so that NaN, which fails every comparison, is refused rather than let through to a
    greedy or garbage decode. The floors are where the samplers' float32 arithmetic breaks: refused here,
    with the argument named, rather than decoded as NaN or as a token outside the vocabulary."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0, got {top_k!r}")
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature >= 0
            and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}: below, logits / "
                         f"temperature can overflow float32, got {temperature!r}")
    if not (isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if top_p < MIN_TOP_P:
        raise ValueError(f"top_p must be at least 2**-126 (about 1.2e-38, float32's smallest normal number; "
                         f"a smaller one rounds to 0 and keeps no token), got {top_p!r}")


def nonfinite_error(kind: str, step: int, dtype, rope: torch.Tensor | None = None,
                    rope_theta: float | None = None) -> ValueError:
    """The error for logits holding `kind` ("NaN" or "inf") at `step` (0: the prompt's), naming the likely
    cause: RoPE tables that are not finite (rope_theta), float16's range, or else the weights' values."""
    if rope is not None and not bool(torch.isfinite(rope).all()):
        why = f"the RoPE tables are not finite: rope_theta = {rope_theta!r}"
    elif dtype == torch.float16:
        why = "float16 overflow? try --dtype bfloat16 or float32"
    else:
        why = "the activations overflowed: check the weights' scale"
    return ValueError(f"logits contain {kind} at step {step} ({why}); no token was taken from them")


def _check_logits(model: Qwen35Model, logits: torch.Tensor, step: int) -> None:
    """Refuse non-finite logits: argmax would pick NaN's index, sampling would fail in torch.multinomial."""
    low, high = torch.aminmax(logits)
    if not bool(torch.isfinite(low) & torch.isfinite(high)):
        kind = "NaN" if bool(torch.isnan(high)) else "inf"
        raise nonfinite_error(kind, step, model.dtype, model.cos, model.config.rope_theta)


def stream(model: Qwen35Model, prompt_ids, max_new_tokens: int, *, greedy: bool = True,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, eos_token_id="config",
           seed: int = 0) -> Iterator[int]:
    """`generate`'s tokens one by one, as a generator. Every argument is checked here, before any work."""
    ids = check_prompt(model, prompt_ids, max_new_tokens)
    if not isinstance(greedy, bool):
        raise TypeError(f"greedy must be True or False, got {greedy!r}")
    if not greedy:
        check_sampling(temperature, top_k, top_p)
    seed = check_seed(seed)
    eos = eos_set(model.config.eos_token_id if isinstance(eos_token_id, str) and eos_token_id == "config"
                  else eos_token_id)
    return _stream(model, ids, max_new_tokens, greedy, temperature, top_k, top_p, eos, seed)


def _stream(model, ids, max_new_tokens, greedy, temperature, top_k, top_p, eos, seed) -> Iterator[int]:
    if max_new_tokens == 0:
        return
    generator = None if greedy else torch.Generator(device=model.device).manual_seed(seed)
    cache = model.new_cache(len(ids) + max_new_tokens)
    logits = model(ids, cache)                                    # prefill: [1, vocab]
    for step in range(max_new_tokens):
        _check_logits(model, logits[-1], step)                    # one reduction: the token read syncs anyway
        if greedy:
            token = int(R.argmax(logits[-1]))
        else:
            token = int(R.sample(logits[-1], temperature, top_k, top_p, generator))
        yield token
        if token in eos or step + 1 == max_new_tokens:
            return
        logits = model([token], cache)                            # decode: one token


def generate(model: Qwen35Model, prompt_ids, max_new_tokens: int, *, greedy: bool = True,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, eos_token_id="config",
             seed: int = 0) -> list[int]:
    """Continue `prompt_ids`; returns the new token ids (an end-of-sequence token included, then stop).

    prompt_ids:   one sequence: a list of ints or a 1-D int tensor (a batch, floats, strings are refused)
    greedy:       argmax (ties to the lowest id); otherwise sample with temperature / top_k / top_p
    eos_token_id: "config" uses the model config's; None never stops early; or an id or list of ids
    seed:         seeds the sampling generator (greedy ignores it), an int in [0, 2**63 - 1]
    Logits that hold NaN or inf are refused (ValueError naming the step), never decoded.
    """
    return list(stream(model, prompt_ids, max_new_tokens, greedy=greedy, temperature=temperature, top_k=top_k,
                       top_p=top_p, eos_token_id=eos_token_id, seed=seed))


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
    return (lambda _model, ids, n, **options: engine.stream(ids, n, **options)), f"triton, {args.level} ({graph})"


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
