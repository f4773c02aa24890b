"""`check`: is a kernel right? Every shape its slot declares, in every dtype the chapter claims, plus the
edge inputs its math has; fresh random inputs, NaN-poisoned outputs, relative error against an fp64
PyTorch reference, a tolerance by dtype, and a report that says where a wrong kernel goes wrong.

Why each part:
- every declared shape: one shape hides the bugs of the others (a missing program offset passes when
  one program covers the whole input; a stride that is wrong only for T > 1 passes at T = 1);
- edge inputs (`Slot.edges`): zero rows, tiny and huge scales, ties, maxima late in a row, the last
  position of a cache: what random inputs rarely draw, so that a typical bug fails on every run;
- fresh inputs every call: a kernel that happens to work on one seed (or on zeros) does not pass;
- poisoned outputs: an element the kernel forgot to write stays NaN, and NaN never passes;
- ||out - ref|| / ||ref|| in fp64: one number that means the same at every shape, and that the
  rounding of the output dtype alone explains (bf16 keeps 8 bits: about 4e-3 per element);
- under the interpreter every load and store is bounds-checked (`memcheck`), so an access that would
  be an illegal address on a GPU is named instead of reading whatever lies there;
- the learner's code never ends or hangs the check: a module that does not import, a kernel that raises
  (SystemExit too) or runs past the time limit (TRITONLLM_CHECK_TIMEOUT seconds per call; by default
  30 under the interpreter, 120 on a GPU) is that case's FAIL with the learner's file and line, never a
  traceback, an exit or a pass.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass, field

import torch

from . import kernels, slots
from .runtime import runtime
from .validate import check_device, check_seed, flag, number

TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}
# Seconds per kernel call, by default. Under the interpreter the slowest correct call of the check took
# about 2 s<!-- unsaved: 2026-12-04 --> (a whole slot's check under 10 s<!-- unsaved: 2026-12-04 -->); on a GPU
# the first call compiles, and an autotuned one benchmarks its configs: well under a minute.
DEFAULT_TIME_LIMIT = {"interpreter": 30.0, "gpu": 120.0}
# The longest limit TRITONLLM_CHECK_TIMEOUT may set: a day. A limit past what a thread's timer can wait
# (`threading.TIMEOUT_MAX`) ends the watchdog's thread with an OverflowError: the call would run with no limit.
MAX_TIME_LIMIT = 86400.0


def time_limit_s() -> float:
    """The time limit of one kernel call: TRITONLLM_CHECK_TIMEOUT seconds (0: none; at most a day), else the
    default."""
    raw = os.environ.get("TRITONLLM_CHECK_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIME_LIMIT["interpreter" if runtime().interpreted else "gpu"]
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"TRITONLLM_CHECK_TIMEOUT must be a number of seconds >= 0, got {raw!r}")
    if value > MAX_TIME_LIMIT:
        raise ValueError(f"TRITONLLM_CHECK_TIMEOUT must be at most {MAX_TIME_LIMIT:g} seconds (a day; 0: no limit), "
                         f"got {raw!r}")
    return value


class TimedOut(BaseException):
    """Raised in the checking thread when a kernel call runs past its time limit. A BaseException, so
    that neither the learner's `except Exception` nor the interpreter's own handlers swallow it."""


@contextmanager
def time_limit(seconds: float):
    """Raise TimedOut in this thread once `seconds` have passed (0: no limit). A watchdog thread sets
    the exception asynchronously: it lands at the next Python bytecode, which is what a looping
    interpreted kernel or a host loop runs (a GPU kernel is waited for by polling, see `_call`), and it
    needs neither the main thread nor SIGALRM (which pytest-timeout may own)."""
    if not seconds:
        yield
        return
    tid, lock, state = threading.get_ident(), threading.Lock(), {"done": False, "fired": False}

    def fire():
        with lock:
            if not state["done"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(TimedOut))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
        if state["fired"]:   # a limit that fired as the call returned: drop the exception still pending
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass
class Case:
    """One shape (or edge input) in one dtype: its trials' worst errors and what went wrong."""
    dtype: str
    shape: dict
    edge: str = ""
    tol: float = 0.0
    errors: list[float] = field(default_factory=list)   # worst relative error of each trial
    problems: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.errors) and not self.problems and all(e <= self.tol for e in self.errors)

    @property
    def label(self) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{self.dtype} {self.edge + ': ' if self.edge else ''}{shape}"

    def lines(self, detail: bool) -> list[str]:
        worst = max(self.errors, default=float("nan"))
        verdict = "ok  " if self.passed else "FAIL"
        line = f"  {verdict} {self.label}"
        if self.errors:
            line += f"  error {worst:.1e} (tolerance {self.tol:.0e})"
        out = [line]
        if detail and not self.passed:
            out += [f"       {p}".replace("\n", "\n       ") for p in self.problems]
            if self.seeds:
                out.append(f"       seeds {self.seeds}")
        return out


@dataclass
class Report:
    """The verdict on one kernel: every case it ran, or why none could run."""
    name: str
    source: str
    note: str
    cases: list[Case] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # problems before any case ran
    implemented: bool = True

    @property
    def passed(self) -> bool:
        return self.implemented and not self.problems and bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def status(self) -> str:
        return "not implemented yet" if not self.implemented else "pass" if self.passed else "FAIL"

    @property
    def summary(self) -> str:
        """The status, with the reason when no case could run (one line, for `progress`)."""
        return f"{self.status}: {self.problems[0]}" if self.problems and not self.cases else self.status

    @property
    def max_error(self) -> float:
        return max((e for c in self.cases for e in c.errors), default=float("nan"))

    @property
    def tol(self) -> float:
        return min((c.tol for c in self.cases), default=0.0)

    @property
    def errors(self) -> list[float]:
        return [e for c in self.cases for e in c.errors]

    @property
    def failed_cases(self) -> list[Case]:
        return [c for c in self.cases if not c.passed]

    def __str__(self) -> str:
        source = f" ({self.source})" if self.source else ""
        if not self.implemented:
            return "\n".join([f"[TODO] {self.name}{source}: not implemented yet"]
                             + [f"    {p}" for p in self.problems])
        verdict = "PASS" if self.passed else "FAIL"
        failed = len(self.failed_cases)
        count = (f"{len(self.cases)} case{'s' * (len(self.cases) != 1)}" + (f", {failed} failed" if failed else "")
                 if self.cases
                 else "no case could run")
        lines = [f"[{verdict}] {self.name}{source}: {count}"]
        if self.note:
            lines.append(f"    kernel: {self.note}")
        lines += [f"    problem: {p}" for p in self.problems]
        shown = 0
        for case in self.cases:   # details for the first few failures; the rest one line each
            lines += case.lines(detail=not case.passed and shown < 3)
            shown += not case.passed
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


DEFAULT_DIMS = {1: ("index",), 2: ("row", "column"), 3: ("token", "head", "column"),
                4: ("batch", "head", "row", "column")}


def _where(index, dims) -> str:
    names = dims if dims and len(dims) == len(index) else DEFAULT_DIMS.get(len(index), ())
    if len(names) != len(index):
        names = [f"dim{i}" for i in range(len(index))]
    return "[" + ", ".join(f"{n} {i}" for n, i in zip(names, index)) + "]"


def _span(mask: torch.Tensor, dims) -> str:
    """Where the True elements of `mask` lie: index ranges along each dim that holds any."""
    names = dims if dims and len(dims) == mask.dim() else DEFAULT_DIMS.get(mask.dim(), ())
    if len(names) != mask.dim():
        names = [f"dim{i}" for i in range(mask.dim())]
    parts = []
    for d, name in enumerate(names):
        hit = mask.flatten(0, d - 1).any(0) if d else mask
        hit = hit.flatten(1).any(1) if hit.dim() > 1 else hit
        idx = hit.nonzero().flatten().tolist()
        if len(idx) == mask.shape[d]:
            parts.append(f"every {name}")
        elif idx:
            parts.append(f"{name} {idx[0]}..{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1))
                         else f"{name} " + ", ".join(map(str, idx[:8])) + (", ..." if len(idx) > 8 else ""))
    return "; ".join(parts)


def _value(x: torch.Tensor) -> str:
    v = x.item()
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def compare(out: torch.Tensor, ref: torch.Tensor, what: str, exact: bool = False, tol: float = 0.0,
            dims: tuple[str, ...] | None = None) -> tuple[float, list[str]]:
    """(relative error, problems) of one output against its reference. The problems say where: how many
    elements were never written (still the poison) and where they lie, and the first wrong element with
    its value and the expected one. A GPU's outputs are compared on that GPU: a 32,768-row cache in fp64 is
    128 MB, and a dozen checks at once on the host's cores would each wait on the others."""
    problems = []
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf"), [f"{what}: shape {list(out.shape)}, reference {list(ref.shape)}"]
    where_ = out.device if out.device.type == "cuda" else torch.device("cpu")
    out, ref = out.detach().to(where_), ref.detach().to(where_)
    if exact or not out.is_floating_point():
        if out.is_floating_point():   # an exact floating output: poisoned with NaN
            unwritten = torch.isnan(out) & ~torch.isnan(ref.to(out.dtype))
        else:
            unwritten = out == torch.iinfo(out.dtype).min
            unwritten &= ref.to(out.dtype) != torch.iinfo(out.dtype).min
        wrong = (out.to(ref.dtype) != ref) & ~(torch.isnan(out.to(torch.float64)) & torch.isnan(ref.to(torch.float64)))
        if unwritten.any():
            problems.append(f"{what}: {int(unwritten.sum())} of {ref.numel()} elements never written "
                            f"({_span(unwritten, dims)})")
        if (wrong & ~unwritten).any():
            first = tuple((wrong & ~unwritten).nonzero()[0].tolist())
            problems.append(f"{what}: {int((wrong & ~unwritten).sum())} of {ref.numel()} elements differ; "
                            f"first at {_where(first, dims)}: got {_value(out[first])}, expected {_value(ref[first])}")
        return int(wrong.sum()) / max(1, ref.numel()), problems
    o, r = out.to(torch.float64), ref.to(torch.float64)
    nan = torch.isnan(o) & ~torch.isnan(r)
    if nan.any():
        problems.append(f"{what}: {int(nan.sum())} of {o.numel()} elements are NaN, never written or NaN "
                        f"from the math ({_span(nan, dims)})")
    finite = torch.isfinite(r)
    nonfinite = ~torch.isfinite(o) & ~nan & finite
    if nonfinite.any():
        first = tuple(nonfinite.nonzero()[0].tolist())
        problems.append(f"{what}: {int(nonfinite.sum())} elements are infinite (overflow?); first at "
                        f"{_where(first, dims)}: got {_value(out[first])}, expected {_value(ref[first])}")
    rf, of = torch.where(finite, r, 0.0), torch.where(finite, o, 0.0)
    denom = torch.linalg.vector_norm(rf).item()
    err = torch.linalg.vector_norm(of - rf).item() / (denom if denom > 0 else 1.0)
    if err != err or nan.any() or nonfinite.any():   # NaN or a non-finite element: never a pass
        err = float("inf")
    if tol and err > tol and not nan.any():
        # an element is wrong when its own error is large against the output's typical size
        scale = max(denom / max(1, rf.numel()) ** 0.5, 1e-30)
        bad = ((o - r).abs() > 4 * tol * torch.maximum(r.abs(), torch.full_like(r, scale))) & finite
        if bad.any():
            first = tuple(bad.nonzero()[0].tolist())
            problems.append(f"{what}: {int(bad.sum())} of {o.numel()} elements wrong ({_span(bad, dims)}); "
                            f"first at {_where(first, dims)}: got {_value(out[first])}, "
                            f"expected {_value(ref[first])}")
    return err, problems


def _chain(exc: BaseException) -> list[BaseException]:
    """exc and its causes, outermost first: the interpreter wraps an error in one InterpreterError per
    jitted function it passes through (a helper called by the kernel adds a layer)."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        chain.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return chain


def _kernel_line(exc: BaseException) -> str:
    """ " (at exercises/conv1d.py:51: w = tl.load(...), called from exercises/conv1d.py:99)": the line of
    a kernel module where the innermost error of the chain was raised, and the kernel line that called
    the helper it sits in, if any."""
    import traceback

    def where(f):
        return f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}"

    frames = [f for e in reversed(_chain(exc)) for f in reversed(traceback.extract_tb(e.__traceback__))
              if "/exercises/" in f.filename or "/solutions/" in f.filename]
    if not frames:
        return ""
    inner = frames[0]
    caller = next((f for f in frames[1:] if (f.filename, f.lineno) != (inner.filename, inner.lineno)), None)
    called = f", called from {where(caller)}" if caller and caller.name != inner.name else ""
    return f" (at {where(inner)}: {(inner.line or '').strip()}{called})"


GPU_FAULT = "the kernel faulted on the GPU"
# Set when a kernel faulted on the GPU or ran past its time limit there: the CUDA context is then lost, or
# still busy with it, and any later GPU work would fail or wait forever. Every later check says so instead.
_gpu_lost: str | None = None


def _gpu_fault(e: BaseException) -> str:
    return (f"{GPU_FAULT} ({str(e).strip().splitlines()[0]}): most often a load or store past a tensor's end "
            "(a mask or an offset). This process's CUDA context is now unusable: restart the Python kernel "
            "(Colab: Runtime > Restart session). The interpreter names the access: run the check on the CPU "
            "with TRITONLLM_FORCE_CPU=1.")


TIMED_OUT = "timed out after"


def _timed_out(seconds: float, on_gpu: bool, what: str = "the kernel (or its wrapper)") -> str:
    still = (" The GPU may still be running it: restart the Python kernel (Colab: Runtime > Restart session)."
             if on_gpu else "")
    return (f"{TIMED_OUT} {seconds:g} s: {what} never returned; a loop that never ends? "
            f"(TRITONLLM_CHECK_TIMEOUT sets the limit){still}")


def _call(fn, kwargs) -> str | None:
    """Run the kernel; under the interpreter with its accesses bounds-checked. Returns a problem or None:
    an access outside every tensor argument, an exception (SystemExit too), or a call past
    `time_limit_s()`, named with the learner's line where there is one. On a GPU it waits for the kernel by
    polling, so that a fault it raises is this case's verdict, not a crash later, and a kernel that never
    ends is reported instead of hanging the check."""
    from . import memcheck
    rt = runtime()
    limit = time_limit_s()
    try:
        with time_limit(limit), kernels.exits_raise():
            if rt.interpreted:   # numpy's overflow warnings are the verdict's business, not the console's
                import numpy as np
                with memcheck.checked(), np.errstate(all="ignore"):
                    fn(**kwargs)
            else:
                fn(**kwargs)
                if rt.device == "cuda":
                    done = torch.cuda.Event()
                    done.record()
                    while not done.query():   # the time limit lands between two polls
                        time.sleep(1e-4)
                    torch.cuda.synchronize()
    except kernels.NotImplementedYet:
        raise
    except TimedOut as e:   # where it was running when the limit came: the loop's line, under the interpreter
        return _timed_out(limit, not rt.interpreted) + _kernel_line(e)
    except KeyboardInterrupt:
        raise
    except BaseException as e:   # noqa: BLE001  (any failure of the learner's code is a verdict, not a crash)
        if not rt.interpreted and "CUDA error" in str(e):
            return _gpu_fault(e)
        chain = _chain(e)
        oob = next((c for c in chain if isinstance(c, memcheck.OutOfBounds)), None)
        if oob is not None:
            return f"out-of-bounds memory access: {oob}{_kernel_line(e)}"
        if isinstance(e, SystemExit):
            return (f"the kernel raised SystemExit ({e.code!r}): a kernel must return, never exit"
                    f"{_kernel_line(e)}")
        shown = e   # the learner's error, not the interpreter's wrappers around it
        while type(shown).__name__ == "InterpreterError" and shown.__cause__ is not None:
            shown = shown.__cause__
        return f"the kernel raised {type(shown).__name__}: {str(shown).strip()[:500]}{_kernel_line(e)}"
    return None


def run_case(fn, reference, make_inputs, make_out, case: Case, *, dtype, device, trials: int,
             seed: int | None, mutated=(), exact=False, edge=None, dims=None) -> Case:
    """Fill `case` with `trials` runs of `fn` on fresh inputs (modified by `edge`, where given), each
    call within `time_limit_s()`."""
    for trial in range(trials):
        s = seed + trial if seed is not None else int.from_bytes(os.urandom(4), "little")
        case.seeds.append(s)
        gen = torch.Generator(device=device).manual_seed(s)
        inputs = _returned(_made(make_inputs, dict(case.shape), dtype, device, gen), "make_inputs")
        if edge is not None:
            inputs = edge.apply(inputs, dict(case.shape), dtype, gen)
        missing = [k for k in mutated if k not in inputs]
        if missing:
            raise ValueError(f"mutated names {missing}, which make_inputs does not return")
        ref_inputs = {k: _to_reference(v) for k, v in inputs.items()}
        expected = _as_tuple(reference(**ref_inputs))
        if not all(isinstance(e, torch.Tensor) for e in expected):
            raise TypeError(f"reference must return a tensor or a tuple of tensors, got {type(expected[0]).__name__}"
                            if len(expected) == 1 else "reference must return a tensor or a tuple of tensors")
        outs = _returned(make_out(inputs), "make_out") if make_out else {}
        for what, buf in outs.items():
            if buf.dtype == torch.bool or buf.is_complex():   # "torch.bool is not supported by torch.iinfo"
                raise TypeError(f"make_out's {what} is a {_dtype_name(buf.dtype)} buffer, which the check cannot "
                                "poison (an element never written would pass): use int8 for a mask, as the "
                                "causal_mask slot does, or a real floating dtype")
            if buf.is_floating_point():
                buf.fill_(float("nan"))
            else:
                buf.fill_(torch.iinfo(buf.dtype).min)
        problem = _call(fn, {**inputs, **outs})
        if problem:
            case.problems.append(problem)
            return case
        got = list(outs.values()) + [inputs[k] for k in mutated]
        names = list(outs) + list(mutated)
        if len(got) != len(expected):
            case.problems.append(f"the reference returned {len(expected)} outputs for {len(got)} checked")
            return case
        worst = 0.0
        for what, g, e in zip(names, got, expected):
            err, problems = compare(g, e, what, exact, case.tol, (dims or {}).get(what))
            worst = max(worst, err)
            case.problems += [p for p in problems if p not in case.problems]
        case.errors.append(worst)
        if case.problems:   # the first failing trial says enough
            break
    return case


def _made(make_inputs, shape: dict, dtype, device, gen) -> dict:
    """make_inputs' inputs, or a MemoryError naming the shape where they do not fit the device's memory (the
    allocator's own message is a page of C++ about bytes)."""
    try:
        return make_inputs(shape, dtype, device, gen)
    except RuntimeError as e:   # torch.OutOfMemoryError on a GPU, a RuntimeError from the CPU allocator
        if not isinstance(e, torch.OutOfMemoryError) and "allocate" not in str(e):
            raise
    dims = ", ".join(f"{k}={v}" for k, v in shape.items())
    raise MemoryError(f"shape {dims}: its inputs do not fit in the {device} memory; check a smaller shape") from None


def _returned(value, name: str) -> dict:
    """What make_inputs / make_out returned, a dict of keyword arguments (a list was an AttributeError)."""
    if not isinstance(value, dict):
        raise TypeError(f"{name} must return a dict of the kernel's keyword arguments, got {type(value).__name__}")
    return value


def _check_fn_arguments(functions: dict, seed, tol, exact, mutated, shape) -> None:
    """check_fn's arguments, each named when wrong: the functions callable (make_out may be None), the seed an
    int in [0, 2**63 - 1] or None, tol a number >= 0 or None, exact a bool, mutated a tuple of input names,
    shape a dict or None. Each was taken before and failed later, not naming it (a str seed in an addition, 2**70
    in torch's manual_seed, a str tol in a comparison), or was read otherwise (mutated="x" as its letters)."""
    for what, f in functions.items():
        if not (callable(f) or (f is None and what == "make_out")):
            raise TypeError(f"{what} must be callable, got {f!r}")
    if seed is not None:
        check_seed(seed)
    if tol is not None and not number(tol, "tol") >= 0:                             # NaN: refused
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    flag(exact, "exact")
    if not (isinstance(mutated, (tuple, list)) and all(isinstance(m, str) for m in mutated)):
        raise TypeError(f"mutated must be a tuple of input names, got {mutated!r}")
    if shape is not None and not isinstance(shape, dict):
        raise TypeError(f"shape must be a dict of dims (make_inputs' first argument) or None, got {shape!r}")


def check_fn(fn, reference, make_inputs, make_out=None, *, name="kernel", shape=None, dtype=None,
             device=None, trials: int = 2, seed: int | None = None, tol: float | None = None,
             mutated: tuple[str, ...] = (), exact: bool = False, note: str = "",
             source: str = "", dims=None) -> Report:
    """Check `fn(**inputs, **outs)` against `reference(**inputs)` at one shape on fresh random inputs.

    make_inputs(shape, dtype, device, generator) -> kwargs; make_out(inputs) -> {kwarg: buffer}
    (poisoned with NaN here). The reference returns the outputs (make_out's order) followed by the
    new values of the `mutated` inputs.
    """
    if type(trials) is not int or trials < 1:
        raise ValueError(f"trials must be a whole number >= 1, got {trials!r}")
    _check_fn_arguments({"fn": fn, "reference": reference, "make_inputs": make_inputs, "make_out": make_out},
                        seed, tol, exact, mutated, shape)
    rt = runtime()
    dtype = _dtypes(dtype)[0] if isinstance(dtype, str) else dtype or rt.dtype
    if tol is None and dtype not in TOLERANCE:        # a KeyError before: float64 is fine with a tol of its own
        raise ValueError(f"dtype {dtype} has no default tolerance: give tol= or one of "
                         f"{[_dtype_name(d) for d in TOLERANCE]}")
    device = check_device(device if device is not None else rt.device, meta=True)
    if device.type == "meta":      # torch's own error came from inside make_inputs, naming no argument
        raise ValueError("device 'meta' makes inputs without values, nothing to check: use 'cpu' or 'cuda'")
    report = Report(name, source, note)
    case = Case(_dtype_name(dtype), dict(shape or {}), tol=tol if tol is not None else TOLERANCE[dtype])
    try:
        report.cases.append(run_case(fn, reference, make_inputs, make_out, case, dtype=dtype, device=device,
                                     trials=trials, seed=seed, mutated=mutated, exact=exact, dims=dims))
    except kernels.NotImplementedYet as e:
        report.implemented, report.problems = False, [str(e)]
    return report


def _dtypes(dtype) -> list[torch.dtype]:
    if dtype is None:
        return []
    if isinstance(dtype, (list, tuple)):
        return [d for x in dtype for d in _dtypes(x)]
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype) or getattr(torch, dtype) not in TOLERANCE:
            raise ValueError(f"dtype must be one of {[_dtype_name(d) for d in TOLERANCE]}, got {dtype!r}")
        return [getattr(torch, dtype)]
    if not isinstance(dtype, torch.dtype) or dtype not in TOLERANCE:      # a set was "unhashable type"
        raise ValueError(f"dtype must be one of {list(TOLERANCE)}, got {dtype!r}")
    return [dtype]


SMALL_ODD = "small odd sizes"


def _lose_gpu(rt, why: str) -> None:
    global _gpu_lost
    if not rt.interpreted:
        _gpu_lost = why


def plan_cases(slot, preset: str, shape: dict | None = None, edges: bool | None = None):
    """The cases `check` runs, as (shape, edge or None, label): the slot's shapes for the preset, then its
    edges. On a GPU the small shapes and edges of the interpreter's plan follow the real ones: the real
    shapes are block-aligned (1024, 128, 16 heads of each kind), so a row padded to its block, a stride
    taken from the wrong head count, a K loop one step short or a sequence shorter than the conv pass
    there; the small plan is the one every planted bug is proven to fail on. `shape=` runs that shape
    alone (and no edges unless `edges=True`)."""
    def one(preset_, shapes, prefix=""):
        edge_list = slot.edges if (edges if edges is not None else shape is None) else []
        return ([(s, None, prefix) for s in shapes]
                + [(e.shape_for(shapes[0]), e, f"{prefix}, {e.name}" if prefix else e.name)
                   for e in edge_list if e.runs_in(preset_)])
    if shape is not None:
        return one(preset, [slot.given_shape(preset, shape)])
    plan = one(preset, slot.all_shapes(preset))
    if preset != "tiny" and slot.all_shapes("tiny"):
        plan += one("tiny", slot.all_shapes("tiny"), SMALL_ODD)
    return plan


def check(name: str, source: str | None = None, *, shape: dict | None = None, dtype=None,
          trials: int = 2, seed: int | None = None, edges: bool | None = None,
          fail_fast: bool = False, verbose: bool = True) -> Report:
    """Check the kernel of one slot: the learner's exercise by default (TRITONLLM_KERNELS / `source`).

    Runs every shape the slot declares for this mode and its edge inputs, in every dtype the slot runs
    in (fp32 and fp16 under the interpreter; the GPU's dtype and fp16 on a GPU), `trials` fresh random
    inputs each. `shape=` checks one shape only (and no edges unless `edges=True`): the dims it gives, the rest
    from the slot's first shape (`check("embedding", shape={"T": 5})`); `dtype=` one dtype
    or a list. `fail_fast`: stop at the first failing case (the verdict is the same). An exercise still
    stubbed is reported "not implemented yet", never a pass. The learner's code never ends the check: a
    module that does not import (or exits) is a FAIL naming its file and line, with no case run; a call
    that raises, exits or runs past `time_limit_s()` is its case's FAIL (after a time-out the check
    stops). A file that is not Python source (a directory, not UTF-8) raises KernelFileError, a
    ValueError naming it.
    """
    slot = slots.get(name)
    if not slot.ready:
        raise NotImplementedError(f"slot {name!r} is planned: its kernel is not written yet")
    if type(trials) is not int or trials < 1:                 # as check_fn: True is no count
        raise ValueError(f"trials must be a whole number >= 1, got {trials!r}")
    if seed is not None and type(seed) is not int:
        raise TypeError(f"seed must be a whole number or None, got {seed!r}")
    if seed is not None:
        check_seed(seed)                          # 2**70 failed in torch's manual_seed: "Overflow when unpacking"
    if edges is not None and not isinstance(edges, bool):
        raise TypeError(f"edges must be True, False or None, got {edges!r}")
    flag(fail_fast, "fail_fast")
    flag(verbose, "verbose")
    if isinstance(dtype, (list, tuple)) and not dtype:
        raise ValueError("dtype=[] names no dtype: give one, a list of them, or None for the slot's own")
    rt = runtime()
    dtypes = _dtypes(dtype) or slot.dtypes(rt)
    limit = time_limit_s()
    if (why := slot.not_here(rt)) is not None:
        report = Report(name, source or kernels.selected(), "", problems=[f"not run: {why}"])
        if verbose:
            print(report)
        return report
    if _gpu_lost and not rt.interpreted:
        report = Report(name, source or kernels.selected(), "", problems=[
            f"not run: {_gpu_lost}; nothing more can run on this GPU until the Python kernel restarts"])
        if verbose:
            print(report)
        return report
    try:
        with time_limit(limit):   # a module-level loop that never ends
            loaded = kernels.load(slot.family, source, slot.function, fallback=False)
        fn = getattr(loaded.module, slot.function, None)
        if not callable(fn):
            raise kernels.KernelImportError(f"{loaded.source}/{slot.family}.py has no function {slot.function}()")
    except kernels.NotImplementedYet as e:
        report = Report(name, "exercises", str(e), implemented=False, problems=[str(e)])
        if verbose:
            print(report)
        return report
    except (kernels.KernelImportError, TimedOut) as e:   # the learner's module: a FAIL, not a traceback
        problem = str(e) if isinstance(e, kernels.KernelImportError) else (
            f"importing {slot.family}.py {_timed_out(limit, False, 'its top level')}{_kernel_line(e)}")
        report = Report(name, "solutions" if source == "solutions" else "exercises", "", problems=[problem])
        if verbose:
            print(report)
        return report
    report = Report(name, loaded.source, loaded.note)
    plan = plan_cases(slot, rt.preset, shape, edges)
    for dt in dtypes:
        tol = (slot.tol or {}).get(dt, TOLERANCE[dt])
        for case_shape, edge, label in plan:
            case = Case(_dtype_name(dt), case_shape, label, (getattr(edge, "tol", None) or {}).get(dt, tol))
            run_case(fn, slot.reference, slot.make_inputs, slot.make_out, case, dtype=dt, device=rt.device,
                     trials=trials, seed=seed, mutated=slot.mutated, exact=slot.exact, edge=edge,
                     dims=slot.dims)
            report.cases.append(case)
            if any(p.startswith(GPU_FAULT) for p in case.problems):
                report.problems.append("the check stopped: nothing more can run on this GPU until a restart")
                _lose_gpu(rt, f"{name}'s kernel faulted on the GPU")
                break
            if any(p.startswith(TIMED_OUT) for p in case.problems):   # every case would wait as long
                report.problems.append(f"the check stopped: a kernel call {TIMED_OUT} {limit:g} s")
                _lose_gpu(rt, f"{name}'s kernel may still be running on the GPU")
                break
            if fail_fast and not case.passed:
                break
        if report.problems or (fail_fast and not report.passed):
            break
    if verbose:
        print(report)
    return report
