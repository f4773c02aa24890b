"""The Engine's arguments, checked before any work: the config, the two sizes, the switches, the level and weight
format, the dtype and device, and fp8 against the GPU. Each refusal is one line naming the argument. `Engine`,
`Engine.from_pretrained` and `Engine.random` all call `check_arguments`, the last two before any weight is loaded
or made; the defaults live here so that the three agree."""
from __future__ import annotations

import torch

from ..config import check_config
from ..validate import FLOATS, check_count, check_device, check_seed
from .forward import Sampling
from .merged import EngineWeights, check_fp8
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
    return check_count(max_seq_len, "max_seq_len", least=1), check_count(prefill_chunk, "prefill_chunk", least=1)


def check_flags(cuda_graph=True, prefill_graph=True, pdl=None, own_weights=False) -> None:
    """The switches True or False (pdl None too: where the GPU has it); a string such as "no" would be true."""
    for name, value in (("cuda_graph", cuda_graph), ("prefill_graph", prefill_graph), ("pdl", pdl),
                        ("own_weights", own_weights)):
        if not (isinstance(value, bool) or (name == "pdl" and value is None)):
            raise TypeError(f"{name} must be True or False{' or None' if name == 'pdl' else ''}, got {value!r}")


def check_dtype(dtype, name: str = "dtype") -> None:
    """A dtype the engine's kernels take (`random_weights` makes float64 too, for the reference model alone)."""
    if dtype not in FLOATS:
        raise TypeError(f"{name} must be float32, float16 or bfloat16 for the engine, got {dtype!r}")


_NOT_GIVEN = object()   # from_pretrained's config: read from the checkpoint, after these checks


def check_arguments(max_seq_len=MAX_SEQ_LEN, prefill_chunk=PREFILL_CHUNK, level=LEVEL, weight_format=WEIGHT_FORMAT,
                    device: torch.device | str | None = None, *, config=_NOT_GIVEN, dtype=None, cuda_graph=True,
                    prefill_graph=True, pdl=None, own_weights=False, merged=None, **_) -> tuple[int, int]:
    """The sizes as ints (`check_sizes`), after the config, the switches, the level and weight format are checked
    and, where given, the dtype, the device and fp8 against its GPU. Takes an Engine's keyword arguments whole
    (the others are not its to check). device=None: the constructor, whose device and dtype are the weights',
    checks those (`check_given_weights`) once their own check has passed. merged: None or an engine's merged weights
    (a string was an AttributeError once the weights had been checked)."""
    if config is not _NOT_GIVEN:
        check_config(config)
    sizes = check_sizes(max_seq_len, prefill_chunk)
    if merged is not None and not isinstance(merged, EngineWeights):
        raise TypeError(f"merged must be another engine's merged weights (engine.weights) or None, got "
                        f"{type(merged).__name__}")
    check_flags(cuda_graph, prefill_graph, pdl, own_weights)
    check_weight_format(level, weight_format)
    if dtype is not None:
        check_dtype(dtype)          # float64, fp8, an integer, a string: before any file is read
    if device is not None:
        check_fp8(weight_format, check_device(device))
    return sizes


def step_args(sampling=None, seed=0) -> tuple[Sampling | None, int]:
    """`prefill`'s and `decode`'s sampling (None: greedy; else a `Sampling`) and seed (`check_seed`), before any work:
    a dict was an AttributeError once the prompt had run, a seed of None or "1" a TypeError there, 1.5 or 2**70 were
    taken (as 1, or modulo 2**31)."""
    if sampling is not None and not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a Sampling(temperature, top_k, top_p) or None (greedy), got {sampling!r}")
    return sampling, check_seed(seed)


def check_given_weights(weights: dict, weight_format: str, dtype: torch.dtype, device: torch.device) -> None:
    """What the weights given to the constructor decide: their dtype one the kernels take, fp8 against their GPU,
    and each tensor contiguous, as the kernels read them in place (a transposed view ran until the first prompt,
    and failed there naming the kernel's argument, not the weight)."""
    check_dtype(dtype, "the weights' dtype")
    check_fp8(weight_format, device)
    for name, t in weights.items():
        if isinstance(t, torch.Tensor) and not t.is_contiguous():
            raise ValueError(f"tensor {name} is not contiguous (strides {tuple(t.stride())} for shape "
                             f"{list(t.shape)}): the engine's kernels read each weight in place; give .contiguous()")
