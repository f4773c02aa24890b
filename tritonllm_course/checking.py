"""`check`: is a kernel right? Fresh random inputs, NaN-poisoned outputs, relative error against an
fp64 PyTorch reference, a tolerance by dtype, and a short report.

Why each part:
- fresh inputs every call: a kernel that happens to work on one seed (or on zeros) does not pass;
- poisoned outputs: an element the kernel forgot to write stays NaN, and NaN never passes;
- ||out - ref|| / ||ref|| in fp64: one number that means the same at every shape, and that the
  rounding of the output dtype alone explains (bf16 keeps 8 bits: about 4e-3 per element).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from . import kernels, slots
from .runtime import runtime

TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


@dataclass
class Report:
    name: str
    source: str
    note: str
    dtype: str
    shape: dict
    errors: list[float] = field(default_factory=list)   # worst relative error of each trial
    tol: float = 0.0
    problems: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems and all(e <= self.tol for e in self.errors)

    @property
    def max_error(self) -> float:
        return max(self.errors, default=float("nan"))

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        source = f" ({self.source})" if self.source else ""
        lines = [f"[{verdict}] {self.name}{source} {self.dtype} {shape}"]
        if self.note:
            lines.append(f"    kernel: {self.note}")
        if self.errors:
            errs = " ".join(f"{e:.1e}" for e in self.errors)
            lines.append(f"    relative error per trial: {errs} (tolerance {self.tol:.0e}; seeds {self.seeds})")
        lines += [f"    problem: {p}" for p in self.problems]
        return "\n".join(lines)

    __repr__ = __str__  # readable in pytest's assertion messages too
    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731  (IPython display)

    def raise_if_failed(self) -> "Report":
        if not self.passed:
            raise AssertionError(str(self))
        return self


def _to_reference(x):
    """Floating tensors go to fp64 (on the same device); everything else is passed as is."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().to(torch.float64)
    return x


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def compare(out: torch.Tensor, ref: torch.Tensor, what: str, exact: bool = False) -> tuple[float, list[str]]:
    """(relative error, problems) of one output against its reference."""
    problems = []
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf"), [f"{what}: shape {list(out.shape)}, reference {list(ref.shape)}"]
    if exact or not out.is_floating_point():
        wrong = (out.to(ref.dtype) != ref).sum().item()
        if wrong:
            problems.append(f"{what}: {wrong} of {ref.numel()} elements differ from the reference")
        return wrong / max(1, ref.numel()), problems
    nan = torch.isnan(out).sum().item()
    if nan:
        problems.append(f"{what}: {nan} of {out.numel()} elements are NaN "
                        "(never written, or the math produced NaN)")
    o, r = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    denom = torch.linalg.vector_norm(r).item()
    err = torch.linalg.vector_norm(o - r).item() / (denom if denom > 0 else 1.0)
    if err != err:  # NaN
        err = float("inf")
    return err, problems


def check_fn(fn, reference, make_inputs, make_out=None, *, name="kernel", shape=None, dtype=None,
             device=None, trials: int = 2, seed: int | None = None, tol: float | None = None,
             mutated: tuple[str, ...] = (), exact: bool = False, note: str = "",
             source: str = "") -> Report:
    """Check `fn(**inputs, **outs)` against `reference(**inputs)` on fresh random inputs.

    make_inputs(shape, dtype, device, generator) -> kwargs; make_out(inputs) -> {kwarg: buffer}
    (poisoned with NaN here). The reference returns the outputs (make_out's order) followed by the
    new values of the `mutated` inputs.
    """
    rt = runtime()
    dtype = dtype or rt.dtype
    device = device or rt.device
    shape = dict(shape or {})
    report = Report(name, source, note, str(dtype).replace("torch.", ""), shape,
                    tol=tol if tol is not None else TOLERANCE[dtype])
    for trial in range(trials):
        s = seed + trial if seed is not None else int.from_bytes(os.urandom(4), "little")
        report.seeds.append(s)
        gen = torch.Generator(device=device).manual_seed(s)
        inputs = make_inputs(shape, dtype, device, gen)
        ref_inputs = {k: _to_reference(v) for k, v in inputs.items()}
        expected = _as_tuple(reference(**ref_inputs))
        outs = make_out(inputs) if make_out else {}
        for buf in outs.values():
            if buf.is_floating_point():
                buf.fill_(float("nan"))
            else:
                buf.fill_(torch.iinfo(buf.dtype).min)
        try:
            fn(**inputs, **outs)
        except kernels.NotImplementedYet as e:
            report.problems.append(str(e))
            return report
        if device == "cuda":
            torch.cuda.synchronize()
        got = list(outs.values()) + [inputs[k] for k in mutated]
        names = list(outs) + list(mutated)
        if len(got) != len(expected):
            report.problems.append(f"the reference returned {len(expected)} outputs for {len(got)} checked")
            return report
        worst = 0.0
        for what, g, e in zip(names, got, expected):
            err, problems = compare(g, e, what, exact)
            worst = max(worst, err)
            report.problems += [p for p in problems if p not in report.problems]
        report.errors.append(worst)
    return report


def check(name: str, source: str | None = None, *, shape: dict | None = None, dtype=None,
          trials: int = 2, seed: int | None = None, verbose: bool = True) -> Report:
    """Check the kernel of one slot: the learner's exercise (falling back to the solution) by default."""
    slot = slots.get(name)
    if not slot.ready:
        raise NotImplementedError(f"slot {name!r} is planned: its kernel is not written yet")
    rt = runtime()
    dtype = dtype or rt.dtype
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    try:
        loaded = kernels.load(slot.family, source, slot.function)
    except kernels.NotImplementedYet as e:
        report = Report(name, "exercises", str(e), str(dtype).replace("torch.", ""), shape or {},
                        tol=TOLERANCE[dtype], problems=[str(e)])
        if verbose:
            print(report)
        return report
    fn = getattr(loaded.module, slot.function)
    tol = (slot.tol or {}).get(dtype, TOLERANCE[dtype])
    report = check_fn(fn, slot.reference, slot.make_inputs, slot.make_out, name=name,
                      shape=shape or slot.shape(rt.preset), dtype=dtype, trials=trials, seed=seed,
                      tol=tol, mutated=slot.mutated, exact=slot.exact, note=loaded.note,
                      source=loaded.source)
    if verbose:
        print(report)
    return report
