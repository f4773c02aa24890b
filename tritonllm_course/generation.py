"""Text generation with the model: one prefill of the prompt, then one cached decode step per token.
The arguments are checked by `validate` (`check_ids`, `check_decoding`, ...), as the engine checks them;
the `tritonllm-course generate` command is `generate_command.py`.
"""
from __future__ import annotations

from typing import Iterator

import torch

from . import reference as R
from .model import Qwen35Model
from .validate import check_count, check_decoding, check_ids, check_seed, eos_ids, nonfinite_error


def check_prompt(model: Qwen35Model, prompt_ids, max_new_tokens: int) -> list[int]:
    """The prompt as a list of ints, after checking the model, ids and lengths; raises TypeError / ValueError saying
    what is wrong (an Engine given as the model was an AttributeError once the prompt had been checked)."""
    if not isinstance(model, Qwen35Model):
        raise TypeError(f"model must be a Qwen35Model (an Engine generates itself: engine.generate(prompt_ids, ...)), "
                        f"got {type(model).__name__}")
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
    check_decoding(greedy, temperature, top_k, top_p)
    seed = check_seed(seed)
    eos = eos_ids(eos_token_id, model.config)
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
