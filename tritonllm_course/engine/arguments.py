"""The Engine's arguments, checked before any work: the two sizes, the level and weight format, and fp8 against
the GPU. Each refusal is one line naming the argument. `Engine`, `Engine.from_pretrained` and `Engine.random`
all call `check_arguments`, the last two before any weight is loaded or made; the defaults live here so that
the three agree."""
from __future__ import annotations

import torch

from ..validate import check_count
from .merged import check_fp8
from .plan import check_weight_format

MAX_SEQ_LEN = 4096     # tokens the cache holds by default
# prompt tokens a pass: a 4,000-token prompt's first token in 17.5 ms<!-- fig:prompt.chunk4096.t4000.ms -->,
# against 33.3 ms<!-- fig:prompt.chunk512.t4000.ms --> in passes of 512 (H200, lab/prefill_chunk_probe.py)
PREFILL_CHUNK = 4096
LEVEL = "operators"
WEIGHT_FORMAT = "native"


def check_sizes(max_seq_len, prefill_chunk) -> tuple[int, int]:
    """The two sizes as ints >= 1, else a TypeError / ValueError naming the argument (1.5 or True would
    otherwise fail deep in an allocation, or run as 1)."""
    sizes = (check_count(max_seq_len, "max_seq_len"), check_count(prefill_chunk, "prefill_chunk"))
    for name, n in zip(("max_seq_len", "prefill_chunk"), sizes):
        if n < 1:
            raise ValueError(f"{name} must be >= 1, got {n}")
    return sizes


def check_arguments(max_seq_len=MAX_SEQ_LEN, prefill_chunk=PREFILL_CHUNK, level=LEVEL, weight_format=WEIGHT_FORMAT,
                    device: torch.device | str | None = None, **_) -> tuple[int, int]:
    """The sizes as ints (`check_sizes`), after the level and weight format are checked and, where `device` is
    given, fp8 against its GPU. Takes an Engine's keyword arguments whole (the others are not its to check).
    device=None: the constructor, whose device is the weights', checks fp8 once their own check has passed."""
    sizes = check_sizes(max_seq_len, prefill_chunk)
    check_weight_format(level, weight_format)
    if device is not None:
        check_fp8(weight_format, torch.device(device))
    return sizes
