"""Find and load kernel modules: the learner's `exercises/<family>.py` or the reference `solutions/<family>.py`.

Which one runs is chosen by `source=` or the environment variable `TRITONLLM_KERNELS`:
  auto       (default) the learner's exercise when its regions are filled in (given `function`, the regions
             that wrapper needs), else the solution
  exercises  the learner's exercise only (an unfilled one raises NotImplementedYet)
  solutions  the solution (what the tests and the GPU scripts select; the engine follows TRITONLLM_KERNELS too)
The learner's module is re-read from disk on every load, so an edit in the editor takes effect at the
next check without restarting the notebook's kernel.

A `@triton.jit` function one chapter teaches and later chapters' kernels build on (the GEMV's walk along a
row, the online softmax, the delta rule's step) is written once, in its family's solution region, and the
later families take it with `jit_function` (a module global their kernels call): the learner's own, once
written.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .regions import call_closure, enclosing_function, regions

SOURCES = ("auto", "exercises", "solutions")


class NotImplementedYet(NotImplementedError):
    """An exercise whose regions are still the stubs: reported as such, never compiled."""


class KernelFileError(ValueError):
    """A kernel module that is not a Python source file at all (a directory, bytes that are not UTF-8):
    bad input to the tools, reported in one line naming the file."""


class KernelImportError(ImportError):
    """A kernel module that fails while being imported (a syntax error, a missing import, an exception or
    `sys.exit` at module level). The message is one line naming the file, the line and the error: the
    learner's mistake, reported as that kernel's failure, never as a traceback of the tools."""


def _shown(path: Path) -> str:
    """`exercises/rmsnorm.py`: the path as the learner knows it (relative to the course root)."""
    try:
        return str(path.relative_to(course_root()))
    except ValueError:
        return str(path)


def source_text(path: Path) -> str:
    """The text of a kernel module, its UTF-8 byte-order mark dropped (Python accepts one, and so does
    the course). A directory, a device, an unreadable file or one that is not UTF-8 raises
    KernelFileError naming it."""
    if path.is_dir():
        raise KernelFileError(f"{_shown(path)} is a directory, not a Python file: move it away and run "
                              "`tritonllm-course make-exercises` to write the exercise again")
    if not path.is_file():   # a device or a pipe (through a link): reading it may never end
        raise KernelFileError(f"{_shown(path)} is not a regular file: put the exercise's Python file there")
    try:
        data = path.read_bytes()
    except OSError as e:   # no read permission, say
        raise KernelFileError(f"{_shown(path)} cannot be read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise KernelFileError(f"{_shown(path)}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}): save the "
                              "file as UTF-8") from None


def _import_error(path: Path, e: BaseException) -> KernelImportError:
    """One line: where in `path` the import failed and why."""
    shown = _shown(path)
    if isinstance(e, SyntaxError):   # also IndentationError, TabError
        code = (e.text or "").strip()
        line = e.lineno
        if line is None:   # Python names no line for a NUL byte: the file's bytes do
            data = path.read_bytes() if path.is_file() else b""
            line = data[:data.index(b"\0")].count(b"\n") + 1 if b"\0" in data else None
        return KernelImportError(f"{shown}" + (f":{line}" if line is not None else "")
                                 + f": {type(e).__name__}: {e.msg}" + (f": {code}" if code else ""))
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
    where = f"{shown}:{frames[-1].lineno}" if frames else shown
    code = f" ({frames[-1].line.strip()})" if frames and frames[-1].line else ""
    if isinstance(e, SystemExit):
        return KernelImportError(f"{where}: the module calls exit ({e.code!r}) while being imported{code}: "
                                 "a kernel module must not exit")
    message = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return KernelImportError(f"{where}: {type(e).__name__}" + (f": {message}" if message else "")
                             + f" while importing it{code}")


@contextmanager
def exits_raise():
    """While a learner's code runs: `os._exit`, which ends the process without unwinding (status 0, no verdict
    printed), raises SystemExit instead, which the tools report like `sys.exit`."""
    real = os._exit

    def refuse(code=0):
        raise SystemExit(code)
    os._exit = refuse
    try:
        yield
    finally:
        os._exit = real


def course_root() -> Path:
    root = os.environ.get("TRITONLLM_COURSE_ROOT")
    return Path(root) if root else Path(__file__).resolve().parents[1]


def module_path(kind: str, family: str) -> Path:
    if kind not in ("exercises", "solutions"):
        raise ValueError(f"kind must be 'exercises' or 'solutions', got {kind!r}")
    if not (isinstance(family, str) and family.isidentifier()):   # a module of the folder: no path, no ../
        raise ValueError(f"a kernel family is a module name such as 'embedding', got {family!r}")
    return course_root() / kind / f"{family}.py"


def has_solutions() -> bool:
    return (course_root() / "solutions").is_dir()


def selected(source: str | None = None) -> str:
    """The source to run: `source` where given, else the one TRITONLLM_KERNELS selects ("auto" when it is
    unset), checked; the message names the one that was wrong."""
    if source is not None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
        return source
    source = os.environ.get("TRITONLLM_KERNELS") or "auto"
    if source not in SOURCES:
        raise ValueError(f"TRITONLLM_KERNELS must be one of {', '.join(SOURCES)}, got {source!r}")
    return source


@dataclass
class Loaded:
    module: ModuleType
    source: str        # "exercises" or "solutions"
    note: str          # one line for the report: why this source


_solution_cache: dict[str, ModuleType] = {}


def _import(kind: str, family: str) -> ModuleType:
    path = module_path(kind, family)
    if not path.exists():
        raise FileNotFoundError(f"no kernel module {path}")
    source_text(path)   # a directory or a file that is not UTF-8: one line naming it
    name = f"tritonllm_kernels.{kind}.{family}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with exits_raise():
            spec.loader.exec_module(module)
    except NotImplementedYet:      # it builds on another family's exercise not filled in yet: that one is named
        sys.modules.pop(name, None)
        raise
    except (Exception, SystemExit) as e:   # SystemExit too: the learner's module must not end the tools
        sys.modules.pop(name, None)
        raise _import_error(path, e) from e
    return module


def exercise_status(family: str, function: str | None = None) -> tuple[bool, str]:
    """(filled, message): are the regions of exercises/<family>.py filled in? With `function`, only
    the regions that function needs (itself and the functions it calls) count, so a learner can check
    one kernel of a family before writing the others."""
    path = module_path("exercises", family)
    if not path.exists():
        if path.parent.exists() and not path.parent.is_dir():   # no exercise can be there: not "to do"
            raise KernelFileError(f"{_shown(path.parent)} is a file, not a folder: move it away and run "
                                  "`tritonllm-course make-exercises` to write the exercises")
        return False, f"{path} does not exist"
    text = source_text(path)
    todo = [r for r in regions(text, str(path)) if r.kind == "EXERCISE" and r.unfilled]
    if function is not None and todo:   # the call graph of the full solution, where there is one
        source = module_path("solutions", family)
        try:
            only = call_closure(source_text(source) if source.is_file() else text, function)
            tree = ast.parse(text)
        except SyntaxError:
            # the learner's file does not parse: importing it names the line, which says more than a stub
            return True, f"your kernel from exercises/{family}.py"
        todo = [r for r in todo if enclosing_function(tree, r.begin + 1) in only]
    if todo:
        lines = ", ".join(str(r.begin + 1) for r in todo)
        return False, f"exercise {path.name} is not implemented yet (fill in the region at line {lines})"
    return True, f"your kernel from exercises/{family}.py"


def load(family: str, source: str | None = None, function: str | None = None, fallback: bool = True) -> Loaded:
    """The module to run. `function`: the wrapper about to be called (its regions decide "filled").
    `fallback=False`: under "auto" an unfilled exercise raises NotImplementedYet instead of running the
    solution (what `check` wants: an unfilled exercise is never a pass)."""
    source = selected(source or None)
    if source == "solutions":
        if family not in _solution_cache:
            _solution_cache[family] = _import("solutions", family)
        return Loaded(_solution_cache[family], "solutions", f"the solution solutions/{family}.py")
    filled, message = exercise_status(family, function)
    if filled:
        return Loaded(_import("exercises", family), "exercises", message)
    if source == "exercises" or not has_solutions() or not fallback:
        raise NotImplementedYet(message)
    loaded = load(family, "solutions")
    loaded.note = f"{message}; using the solution instead"
    return loaded


def jit_function(family: str, name: str, caller: str):
    """The `@triton.jit` function `name` of kernel module `family`, for the kernel module at `caller` (its
    `__file__`) to call from its kernels, e.g. `online_softmax_update = kernels.jit_function("attention",
    "online_softmax_update", __file__)` in flash_attention.py: the chapter that teaches it holds it, once.

    A solution builds on the solution. An exercise builds on the learner's module once the regions of `name`
    are filled in, else (under "auto", with solutions/ there) on the solution; under "exercises", or in a
    student version, an unfilled one raises NotImplementedYet naming the exercise to fill in first."""
    if Path(caller).parent.name == "solutions":
        loaded = load(family, "solutions")
    else:
        try:
            loaded = load(family, "exercises" if selected() == "exercises" else "auto", name)
        except NotImplementedYet as e:
            raise NotImplementedYet(f"{e}: {_shown(Path(caller))} builds on its {name}") from None
    try:
        return getattr(loaded.module, name)
    except AttributeError:
        raise AttributeError(f"{module_path(loaded.source, family)} has no function {name!r}") from None


def get(family: str, name: str, source: str | None = None):
    """One function of a kernel module, e.g. `get("rmsnorm", "rms_norm")`: a public name only ("__dict__" gave the
    module's namespace, 5 an unclear error)."""
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"name must be a public function name of the module, such as 'rms_norm', got {name!r}")
    loaded = load(family, source, name)
    try:
        return getattr(loaded.module, name)
    except AttributeError:
        raise AttributeError(f"{module_path(loaded.source, family)} has no function {name!r}") from None


def sources_line(used: dict[str, str]) -> str:
    """{slot: source it ran from} as one line: the count per source, most used first, naming the slots of
    the others, e.g. "kernels: 58 solutions, 3 exercises (ln1, ln2, qk_norm)". An "auto: x" source counts
    as x: what was actually loaded."""
    by_source: dict[str, list[str]] = {}
    for slot, source in used.items():
        by_source.setdefault(source.removeprefix("auto: "), []).append(slot)
    ranked = sorted(by_source.items(), key=lambda item: -len(item[1]))
    parts = []
    for i, (source, names) in enumerate(ranked):
        named = f" ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if i else ""
        parts.append(f"{len(names)} {source}{named}")
    return "kernels: " + (", ".join(parts) or "none")
