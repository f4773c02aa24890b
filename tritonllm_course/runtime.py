"""Runtime mode: a real GPU, or Triton's CPU interpreter.

`setup()` must run before `triton` is imported: the interpreter is chosen by the environment variable
`TRITON_INTERPRET=1`, which Triton reads when kernels are decorated. Every notebook calls it in its
first code cell and the test suite calls it in `conftest.py`.
"""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .config import PRESETS, Qwen35Config

DTYPE_NAMES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Runtime:
    mode: str                 # "gpu" or "interpreter"
    device: str               # "cuda" or "cpu"
    dtype_name: str           # activation/weight dtype of the chapter: bfloat16, float16 or float32
    preset: str               # "qwen3.5-0.8b" or "tiny"
    gpu_name: str | None
    capability: tuple[int, int] | None

    @property
    def dtype(self):
        import torch
        return getattr(torch, self.dtype_name)

    @property
    def config(self) -> Qwen35Config:
        return PRESETS[self.preset]

    @property
    def on_gpu(self) -> bool:
        return self.mode == "gpu"

    @property
    def interpreted(self) -> bool:
        return self.mode == "interpreter"

    def summary(self) -> str:
        import torch
        import triton
        where = f"GPU {self.gpu_name} (sm_{self.capability[0]}{self.capability[1]})" if self.on_gpu \
            else f"CPU ({platform.machine()}), Triton interpreter"
        return (f"tritonllm_course | mode={self.mode} | {where} | dtype={self.dtype_name} | "
                f"shapes={self.preset} | triton {triton.__version__} | torch {torch.__version__}")


_RUNTIME: Runtime | None = None


class SetupError(ValueError):
    """What `setup` refuses (a dtype, a preset, TRITONLLM_COURSE_ROOT), in one line naming where it came from: the
    command line prints it as its error, never a traceback."""


def _is_course(folder: Path) -> bool:
    return (folder / "exercises").is_dir() and (folder / "tritonllm_course").is_dir()


def course_folder() -> Path | None:
    """The course's folder (the one with exercises/, notebooks/ and, for instructors, solutions/), or None.

    An editable install (`make lab`, `make test`) is the course folder itself. A plain `pip install .`
    copies only the package into site-packages: the folder is then TRITONLLM_COURSE_ROOT, else the current
    folder or the nearest one above it that holds a course. Found that way, it is written into
    TRITONLLM_COURSE_ROOT, which every part of the package reads (`kernels.course_root`)."""
    if os.environ.get("TRITONLLM_COURSE_ROOT"):
        return Path(os.environ["TRITONLLM_COURSE_ROOT"])
    here = Path(__file__).resolve().parents[1]
    if _is_course(here):
        return here
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if _is_course(folder):
            os.environ["TRITONLLM_COURSE_ROOT"] = str(folder)
            return folder
    return None


def course_root_error() -> str | None:
    """Why TRITONLLM_COURSE_ROOT, where it is set, names no course folder, in one line; None when it does or is
    unset. A course folder holds exercises/ or solutions/ (a student copy has no solutions/, a scratch course
    of the tests or of chapter 30_troubleshooting no notebooks/): a path to nothing, a file or an empty folder
    would otherwise show every slot "to do" and every chapter missing, as if the course were there."""
    root = os.environ.get("TRITONLLM_COURSE_ROOT")
    if not root:
        return None
    folder = Path(root)
    try:
        if folder.is_dir() and any((folder / kind).is_dir() for kind in ("exercises", "solutions")):
            return None
        what = "a folder without exercises/ or solutions/" if folder.is_dir() else \
            "not a folder" if folder.exists() else "not there"
    except OSError as e:   # a name too long, a folder that cannot be searched
        what = f"unreadable ({e.strerror or e})"
    return (f"TRITONLLM_COURSE_ROOT={root} is {what}: set it to the course's folder (the one with exercises/ "
            "and notebooks/) or unset it")


NO_COURSE = ("no course folder found: tritonllm_course is installed without one (a plain `pip install .`); "
             "run from the course folder (the one with exercises/ and notebooks/) or a folder inside it, or set "
             "TRITONLLM_COURSE_ROOT to it")


def gpu_available() -> bool:
    """Whether `setup` chooses a GPU here (one is visible and TRITONLLM_FORCE_CPU is not 1), asked without setting
    anything up: a GPU script says it needs one even after its imports loaded triton."""
    if os.environ.get("TRITONLLM_FORCE_CPU") == "1":
        return False
    import torch
    return torch.cuda.is_available()


def interpreter_unless_gpu() -> None:
    """Before triton's first import in a process that may have no GPU (the CLI's torch commands import it with
    their modules): switch on the CPU interpreter there, as `setup` would, so that setup finds triton ready."""
    if "triton" not in sys.modules and not gpu_available():
        os.environ["TRITON_INTERPRET"] = "1"


def setup(dtype: str | None = None, preset: str | None = None, quiet: bool = False) -> Runtime:
    """Choose the mode, the dtype and the shape preset; print one summary line.

    dtype: None picks $TRITONLLM_DTYPE where set, else bfloat16 on sm_80+, float16 on older GPUs (Colab's T4),
    float32 on the CPU.
    preset: None picks the real Qwen3.5-0.8B shapes on a GPU and `tiny` on the CPU.
    A dtype or preset it cannot run, or a TRITONLLM_COURSE_ROOT that names no course, raises SetupError (a
    ValueError) naming it, before anything is set up.
    """
    global _RUNTIME
    if (why := course_root_error()) is not None:   # before any work: every kernel and chapter is read from it
        raise SetupError(why)
    gpu = gpu_available()
    if not gpu:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "No GPU, and `triton` was imported before tritonllm_course.setup() could switch on the "
                "CPU interpreter. Restart the kernel and run the set-up cell first.")
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    cap = torch.cuda.get_device_capability() if gpu else None
    # TRITONLLM_DTYPE=float16 runs a whole suite in a T4's dtype on a newer GPU (scripts/gpu_check.sh)
    source = "dtype" if dtype else "TRITONLLM_DTYPE"      # where a refused dtype came from, for its message
    dtype = dtype or os.environ.get("TRITONLLM_DTYPE") or None
    if dtype is None:
        dtype = ("bfloat16" if cap >= (8, 0) else "float16") if gpu else "float32"
    if dtype not in DTYPE_NAMES:
        raise SetupError(f"{source} must be one of {DTYPE_NAMES}, got {dtype!r}")
    given = f" ({source}={dtype})" if source != "dtype" else ""
    if gpu and dtype == "bfloat16" and cap < (8, 0):
        raise SetupError(f"bfloat16 needs sm_80 or newer{given}; this GPU is sm_{cap[0]}{cap[1]}: use float16")
    if not gpu and dtype == "bfloat16":
        raise SetupError(f"bfloat16 arithmetic is wrong under Triton's CPU interpreter{given}; "
                         "use float32 or float16 on the CPU")
    preset = preset or ("qwen3.5-0.8b" if gpu else "tiny")
    if preset not in PRESETS:
        raise SetupError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")

    _RUNTIME = Runtime(mode="gpu" if gpu else "interpreter", device="cuda" if gpu else "cpu",
                       dtype_name=dtype, preset=preset,
                       gpu_name=torch.cuda.get_device_name() if gpu else None, capability=cap)
    if not gpu:
        _install_cpu_benchmarker()
        _install_bool_masks()
        _install_scalar_index()
    if not quiet:
        print(_RUNTIME.summary())
    return _RUNTIME


def runtime() -> Runtime:
    """The current runtime; runs `setup(quiet=True)` the first time if nobody has."""
    return _RUNTIME or setup(quiet=True)


# Programmatic dependent launch (chapter 18_cuda_graphs, `triton_helpers.pdl_wait`): the engine turns it on around
# the kernels of its decode step and prompt chunks (`Engine._launches`); a wrapper whose kernel takes PDL passes
# `**pdl_args()` to its launch. One switch for the kernel's PDL constexpr and the launch attribute: a kernel
# launched with PDL that never waits could read its inputs before the kernel that writes them has finished.
_PDL = False
_OVERLAP = True     # False: the PDL kernels launched without the attribute (`no_launch_overlap`)


def pdl_args() -> dict:
    """The launch arguments of a kernel that takes PDL: {"PDL": on, "launch_pdl": on}."""
    return {"PDL": _PDL, "launch_pdl": _PDL and _OVERLAP}


@contextlib.contextmanager
def no_launch_overlap():
    """The PDL kernels, with their launch parameters, launched without the attribute: each starts only
    when the one before has finished. What PDL itself changes is then the timing alone: the outputs are
    bit-identical (tests/model/test_pdl.py, `tritonllm-course bench`)."""
    global _OVERLAP
    before, _OVERLAP = _OVERLAP, False
    try:
        yield
    finally:
        _OVERLAP = before


@contextlib.contextmanager
def programmatic_launches(on: bool = True):
    """Launch the kernels that take PDL with it (on an sm_90+ GPU; harmless under the interpreter)."""
    global _PDL
    before, _PDL = _PDL, bool(on)
    try:
        yield
    finally:
        _PDL = before


def pdl_supported() -> bool:
    """Whether this machine's GPU has programmatic dependent launch (sm_90 and newer)."""
    rt = runtime()
    return rt.mode == "gpu" and rt.capability >= (9, 0)


def _cpu_do_bench(fn, warmup=1, rep=1, quantiles=None, return_mode="mean", **_):
    """Wall-clock stand-in for `triton.testing.do_bench` under the interpreter (autotune needs one)."""
    fn()
    times = []
    for _ in range(max(1, min(int(rep), 3))):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    med = times[len(times) // 2]
    return [med for _ in quantiles] if quantiles else med


def _install_cpu_benchmarker() -> None:
    """Under the interpreter there is no GPU driver: `@triton.autotune` and `do_bench` would fail with
    "0 active drivers". Patch a CPU timer into both so autotuned kernels still run (and pick any config)."""
    import triton
    import triton.testing
    from triton.runtime import autotuner

    triton.testing.do_bench = _cpu_do_bench
    if getattr(autotuner.Autotuner, "_tritonllm_patched", False):
        return
    original_init = autotuner.Autotuner.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self._do_bench = _cpu_do_bench  # read by the `do_bench` property in triton 3.x

    autotuner.Autotuner.__init__ = init
    autotuner.Autotuner._tritonllm_patched = True


# The interpreter's builder methods that take a mask (an argument named `mask`)
_MASKED = ("create_masked_load", "create_masked_store", "create_atomic_rmw")


def bool_mask(handle):
    """The interpreter's mask handle as a bool one (nonzero is True), as the compiler types every mask (int1)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    data = getattr(handle, "data", None)
    if data is None or np.asarray(data).dtype == np.bool_:
        return handle
    return TensorHandle(np.asarray(data).astype(np.bool_), tl.int1)


def _install_bool_masks() -> None:
    """Triton 3.9's interpreter loads and stores through a helper that takes only a bool mask, while its
    comparisons keep the integer type of what they compare: `in_row & (pos < n)`, a block of lanes `&` a
    condition on a loaded scalar, reaches that helper as int32 or int64 and fails with "mask has unsupported
    dtype". The compiler makes every comparison int1 and runs the same kernel, so a learner's natural mask
    would fail on the CPU alone. Every mask goes to the interpreter as bool (earlier triton releases take an
    integer mask as it is: unchanged there)."""
    import inspect

    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_tritonllm_bool_masks", False):
        return
    for name in _MASKED:
        original = getattr(builder, name, None)
        params = list(inspect.signature(original).parameters) if original else []
        if "mask" not in params:
            continue
        at = params.index("mask")

        def patched(*args, _original=original, _at=at, **kwargs):
            if len(args) > _at:
                args = (*args[:_at], bool_mask(args[_at]), *args[_at + 1:])
            elif "mask" in kwargs:
                kwargs["mask"] = bool_mask(kwargs["mask"])
            return _original(*args, **kwargs)

        setattr(builder, name, patched)
    builder._tritonllm_bool_masks = True


def _install_scalar_index() -> None:
    """Triton before 3.7 turns an interpreter scalar (an array of one element) into a Python int with
    `int(array)`, which numpy 2.4 refuses for an array of one dimension ("only 0-dimensional arrays can be
    converted to Python scalars"): every `range(0, K, BLOCK_K)` over a runtime K failed. Triton 3.7 squeezes
    the array first; so does this, on the releases that do not (their `_patch_lang_tensor(tensor)` takes
    the one argument; 3.7's takes a scope too and is left as it is)."""
    import inspect

    import numpy as np
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_tritonllm_patched", False) \
            or len(inspect.signature(original).parameters) != 1:
        return

    def patch_lang_tensor(tensor):
        original(tensor)
        tensor.__index__ = lambda self: int(np.asarray(self.handle.data).squeeze())

    patch_lang_tensor._tritonllm_patched = True
    interpreter._patch_lang_tensor = patch_lang_tensor
