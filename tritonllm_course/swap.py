"""Swap kernels into the reference model and check that its greedy tokens do not change.

The reference model calls every operator through `tritonllm_course.reference` (`R.rms_norm(...)`,
`R.linear(...)`, ...). `swapped(rms_norm=my_kernel)` replaces that function, for the duration of a
`with` block, everywhere the model and the reference ops look it up, so composite references (the
MLP calling `swiglu`, say) pick up the kernel too. A kernel's host wrapper has the reference op's
signature (plus `out=`), so it drops in.

The comparison runs in fp32: with random weights the logits of a 248,320-token vocabulary are close
together, and bf16 rounding differences alone can flip an argmax. In fp32 a correct kernel leaves every
token unchanged and the logits within 1e-4. The random weights are scaled up by 5 from the usual N(0, 0.02)
initialisation: at that scale a random model's greedy path is varied rather than one token repeated, so
identical tokens mean something.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass

import torch

from . import reference as R
from .runtime import runtime
from .validate import MAX_SEED, flag

_PATCHED_PACKAGES = ("tritonllm_course.reference", "tritonllm_course.model", "tritonllm_course.generation")


def check_ops(ops: dict) -> None:
    """Each name a reference op's, each value callable, else a KeyError / TypeError naming it. A name with a leading
    underscore is none (__init__, the module's own method, was taken and swapped nothing)."""
    unknown = [n for n in ops if not (isinstance(n, str) and not n.startswith("_") and callable(getattr(R, n, None)))]
    if unknown:
        raise KeyError(f"no reference op named {unknown}; see tritonllm_course.reference")
    for name, fn in ops.items():
        if not callable(fn):
            raise TypeError(f"{name}={fn!r} is not callable: pass the function that replaces {name}")


@contextlib.contextmanager
def swapped(**ops):
    """Replace reference ops by name (e.g. `rms_norm=kernel`) inside the model for a `with` block."""
    check_ops(ops)
    undo = []
    for name, fn in ops.items():
        original = getattr(R, name)
        for mod_name, mod in list(sys.modules.items()):
            if mod_name.startswith(_PATCHED_PACKAGES) and getattr(mod, name, None) is original:
                setattr(mod, name, fn)
                undo.append((mod, name, original))
    try:
        yield
    finally:
        for mod, name, original in reversed(undo):
            setattr(mod, name, original)


LOGITS_TOL = 1e-4
WEIGHT_SCALE = 5.0


@functools.lru_cache(maxsize=1)
def _model(preset: str, device: str):
    from .config import PRESETS
    from .model import Qwen35Model
    from .weights import random_weights
    weights = random_weights(PRESETS[preset], dtype=torch.float32, device=device, seed=0)
    for name, w in weights.items():
        if w.dim() == 2:             # matrices and the embedding; norms, gates and conv stay as initialised
            w.mul_(WEIGHT_SCALE)
    return Qwen35Model(PRESETS[preset], weights)


@dataclass
class SwapReport:
    ops: list[str]
    prompt: list[int]
    reference_tokens: list[int]
    swapped_tokens: list[int]
    logits_rel_diff: float     # prefill's last-position logits, swapped vs reference

    @property
    def identical(self) -> bool:
        return self.reference_tokens == self.swapped_tokens

    @property
    def passed(self) -> bool:
        return self.identical and self.logits_rel_diff <= LOGITS_TOL

    def __str__(self) -> str:
        verdict = ("PASS: tokens identical" if self.passed else
                   "FAIL: tokens identical, logits differ" if self.identical else "FAIL: tokens differ")
        return (f"[{verdict}] swapped into the model: {', '.join(self.ops)}\n"
                f"    reference: {self.reference_tokens}\n"
                f"    swapped:   {self.swapped_tokens}\n"
                f"    last-position logits after the prompt, relative difference: {self.logits_rel_diff:.1e} "
                f"(tolerance {LOGITS_TOL:.0e})")

    __repr__ = __str__


def compare_greedy(ops: dict, n_new: int = 8, prompt_len: int = 11, seed: int = 0,
                   verbose: bool = True) -> SwapReport:
    """Greedy tokens of the fp32 reference model (tiny on the CPU, full size on a GPU, random weights)
    with and without `ops` ({reference op name: kernel}) swapped in."""
    from .generation import generate
    for name, value, least in (("n_new", n_new, 0), ("prompt_len", prompt_len, 1), ("seed", seed, 0)):
        if type(value) is not int or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    if seed > MAX_SEED:                                 # torch.Generator's seed is 64 bits
        raise ValueError(f"seed must be a whole number in [0, 2**63 - 1], got {seed}")
    flag(verbose, "verbose")                            # "no" was true: the report printed
    from .config import PRESETS
    rt = runtime()
    if prompt_len + n_new > (room := PRESETS[rt.preset].max_position_embeddings):
        raise ValueError(f"prompt_len + n_new is {prompt_len + n_new}, more than the model's {room} positions")
    if not isinstance(ops, dict):
        raise TypeError(f"ops must be a dict of {{reference op name: kernel}}, got {type(ops).__name__}")
    if not ops:                                         # nothing swapped: a pass that tests no kernel
        raise ValueError("ops is empty: give at least one {reference op name: kernel} to swap in")
    check_ops(ops)
    model = _model(rt.preset, rt.device)
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.config.vocab_size, (prompt_len,), generator=gen).tolist()

    def run():
        logits = model(prompt)
        return logits[-1].double(), generate(model, prompt, n_new, eos_token_id=None)

    ref_logits, ref_tokens = run()
    with swapped(**ops):
        new_logits, new_tokens = run()
    diff = (torch.linalg.vector_norm(new_logits - ref_logits) / torch.linalg.vector_norm(ref_logits)).item()
    report = SwapReport(sorted(ops), prompt, ref_tokens, new_tokens, diff)
    if verbose:
        print(report)
    return report
