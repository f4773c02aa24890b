"""From naive to fast: Qwen3.5 one change at a time, each step measured against the one before (chapter
29_naive_to_fast).

The source article takes a C++/CUDA GPT-2 engine from a naive start to fast in four rounds. The ladder takes
the same steps in Triton on Qwen3.5, and the course's own after them:

    naive -> coalesced -> cooperative GEMV -> prompt as GEMM -> KV cache + DeltaNet state
          -> FlashAttention / FlashDecoding -> fused residual + norm -> no syncs
          -> static buffers (the engine) -> CUDA graph -> fewest kernels -> PDL

`rungs.RUNGS` is the table: each step a `ModelPath` (the reference model with the course's kernels swapped
in: the early steps, which the engine never takes) or an `EnginePath` (the engine's levels and options:
the later ones). Its only kernel of its own, the one-program-per-output projection, is chapter 29_naive_to_fast's
exercise (`naive_gemv`); `naive.py` runs it on transposed copies of the matrices, one token row at a time.
`rungs.climb` times and checks every step; `results` writes and draws it; `measure` does both for a
config, and `python -m tritonllm_course.ladder --out DIR` on a GPU writes DIR/ladder_<gpu>_<date>.{json,md,png}.
"""
from __future__ import annotations

import importlib
import sys
import time

import torch

from . import results

# imported on first use: `python -m tritonllm_course.ladder` imports this package before it can choose
# between the GPU and the CPU interpreter, which must happen before triton is imported
_LAZY = {**dict.fromkeys(("Transposed", "per_output_linear", "token_by_token"), "naive"),
         **dict.fromkeys(("RUNGS", "Check", "EnginePath", "ModelPath", "Row", "Rung", "climb", "kernel_families",
                          "prompt_ids", "runner", "rung_named", "rungs_for"), "rungs")}

__all__ = ["measure", "results", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def measure(config_name: str = "qwen3.5-0.8b", dtype=torch.bfloat16, device="cuda", *, steps=None,
            prompt_len: int = 128, tokens: int = 32, uncached_tokens: int = 2, repeats: int = 3,
            check: bool = True, check_prompt_len: int = 8, check_tokens: int = 4, source: str | None = None,
            fastest_first: bool = False, budget_s: float | None = None, seed: int = 0, stem=None,
            log=sys.stderr) -> dict:
    """The ladder of a config (a preset name) on random weights, as a result dict (`results.result`).

    check: on a GPU, a second run of every step in fp32 on weights five times transformers' initialisation (a
           varied greedy path), its tokens against the reference model's; on the CPU in fp32, the timed run's
           own tokens on those weights. stem: write stem.{json,md,png} after every step.
    steps: default all of them (`rungs.RUNGS`). The other arguments: `rungs.climb`.
    """
    from ..config import PRESETS
    from .rungs import RUNGS, Check, climb, prompt_ids
    from ..demo import varied_weights
    from ..weights import random_weights
    if config_name not in PRESETS:
        raise ValueError(f"config_name must be one of {sorted(PRESETS)}, got {config_name!r}")
    if check and (check_prompt_len < 1 or check_tokens < 3):
        raise ValueError(f"the check needs a prompt of >= 1 token and >= 3 new tokens (the engine's stream runs a "
                         f"step ahead); got {check_prompt_len} and {check_tokens}")
    config, device = PRESETS[config_name], torch.device(device)
    same_run = device.type == "cpu" and dtype == torch.float32
    if check and same_run:   # the timed run is the check: fp32, varied weights
        weights, how = varied_weights(config, dtype=dtype, device=device, seed=seed), "timed"
        info = {"dtype": "float32", "weights": "5x transformers' initialisation, the timed run itself",
                "prompt_len": prompt_len,
                "tokens": tokens if tokens == uncached_tokens else f"{tokens} ({uncached_tokens} without a KV cache)"}
    else:
        weights, how, info = random_weights(config, dtype=dtype, device=device, seed=seed), None, None
        if check:
            check_weights = varied_weights(config, dtype=torch.float32, device=device, seed=seed)
            how = Check(check_weights, prompt_ids(config, check_prompt_len, seed + 1), check_tokens)
            info = {"dtype": "float32", "weights": "5x transformers' initialisation, a run of its own",
                    "prompt_len": check_prompt_len, "tokens": check_tokens}
    started = time.perf_counter()

    def as_result(rows):
        return results.result(rows, config, config_name=config_name, dtype=dtype, device=device,
                              prompt_len=prompt_len, tokens=tokens, uncached_tokens=uncached_tokens,
                              repeats=repeats, check=info, seconds=time.perf_counter() - started)

    def on_row(rows):
        if stem is not None:
            results.write(as_result(rows), stem)

    rows = climb(config, weights, steps=RUNGS if steps is None else steps, prompt_len=prompt_len, tokens=tokens,
                 uncached_tokens=uncached_tokens, repeats=repeats, source=source, check=how,
                 fastest_first=fastest_first, budget_s=budget_s, seed=seed, on_row=on_row, log=log)
    res = as_result(rows)
    if stem is not None:
        results.write(res, stem)
    return res

