"""Every kernel the engine launches, compiled for the learners' GPUs without them, and checked against
each GPU's limits (`tritonllm-course targets`).

How the launches are found: the engine of Qwen3.5-0.8B (`engine.Engine`, the real shapes) runs at every
level on the meta device (tensors without memory), its kernels from solutions/, with the config functions
choosing for the target (`triton_helpers.compiling_for`): a prompt of two chunks (the first of a fresh
sequence, one after it), then a greedy and a sampled decode step. Each launch is recorded instead of run,
and typed by Triton's own binder for that target (the pointer alignments and the integer hints a real
launch would get); chapter 26_autotune's autotuned GEMV and GEMM are called at every projection's shape and each
config that survives their pruning, run for that target, is taken. So the signatures, constexprs, warps
and stages are those the engine launches there, never retyped.

Each distinct launch is compiled with `triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`,
which runs on a CPU with the ptxas the triton wheel ships, and its shared memory, registers and local
memory (spills) read from the cubin (`cuobjdump -res-usage`). A kernel fits a GPU when its shared memory
is within the GPU's (`triton_helpers.GPUS`), its registers within 255 a thread and its block's within the
64K of an SM, and it takes PDL only on sm_90 and newer. Local memory is reported, not refused: a spill is
slow, never wrong.

Triton's interpreter lowers nothing, so under it (the tests, a CPU chapter) the survey runs in a fresh
Python process without it, as `lowering` does. The typing uses Triton's launch path itself
(`create_function_from_signature`, `JITFunction._pack_args`): checked with triton 3.7.1.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .safe_files import UnreadableFile, UnsafeWrite, atomic_write_text, check_writable, read_regular, resolved

LEVELS = ("operators", "fused", "fast")
PROMPT_CHUNK = 4096           # the engine's default prefill chunk (arguments.PREFILL_CHUNK; a test holds them equal)
PROMPT = PROMPT_CHUNK + 128   # two chunks: a full one and a short one after it
MAX_SEQ_LEN = 2 * PROMPT_CHUNK   # a cache that holds the prompt and the decode steps
DTYPE_NAMES = ("bfloat16", "float16")


@dataclass
class Kernel:
    """One distinct launch of one kernel compiled for one GPU in one dtype."""
    name: str
    arch: int
    dtype: str
    where: list[str]                          # the levels that launch it ("operators", ...), or "autotune"
    constexprs: dict
    num_warps: int
    num_stages: int
    pdl: bool                                 # launched with the PDL attribute or its constexpr on
    shared_bytes: int = 0
    registers: int = 0                        # a thread
    local_bytes: int = 0                      # a thread: spills (and arrays the compiler could not keep)
    problems: list[str] = field(default_factory=list)
    pointers: list[str] = field(default_factory=list)    # the element types of its pointer arguments

    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.constexprs.items()
                          if k.isupper() and not isinstance(v, str) or k.startswith("BLOCK"))
        types = "/".join(self.pointers)
        return f"{self.name}[{shown}] {types} w{self.num_warps} s{self.num_stages}"


@contextlib.contextmanager
def _recording(gpu, dtype_name: str):
    """Launches recorded, not run: `JITFunction.run` and `Autotuner.run` replaced for the block; the course's
    runtime set to compile for `gpu` on the meta device. Meta tensors have neither values nor addresses of
    their own (every one starts at 0), so the host checks that read them (`validate.device_range`, and the
    overlap check `validate.disjoint` where there is one) are skipped for them."""
    import triton.runtime.autotuner as autotuner
    import triton.runtime.jit as jit

    from . import triton_helpers, validate
    rt = importlib.import_module("tritonllm_course.runtime")    # the module: the package's `runtime` is a function
    launches: list[tuple] = []

    def run(self, *args, grid, warmup=False, **kwargs):
        launches.append((self, None, args, kwargs))

    def tuned(self, *args, grid=None, warmup=False, **kwargs):
        launches.append((self.fn, self, args, kwargs))

    checks = {name: getattr(validate, name) for name in ("device_range", "device_distinct", "disjoint")
              if hasattr(validate, name)}

    def unless_meta(check):
        def call(*args, **kwargs):
            tensors = [t for a in (*args, *kwargs.values()) for t in (a.values() if isinstance(a, dict) else (a,))
                       if hasattr(t, "device")]
            return None if any(t.device.type == "meta" for t in tensors) else check(*args, **kwargs)
        return call

    saved = (jit.JITFunction.run, autotuner.Autotuner.run, rt._RUNTIME)
    jit.JITFunction.run, autotuner.Autotuner.run = run, tuned
    for name, check in checks.items():
        setattr(validate, name, unless_meta(check))
    rt._RUNTIME = rt.Runtime(mode="compile", device="meta", dtype_name=dtype_name, preset="qwen3.5-0.8b",
                             gpu_name=gpu.name, capability=divmod(gpu.capability, 10))
    try:
        with triton_helpers.compiling_for(gpu):
            yield launches
    finally:
        jit.JITFunction.run, autotuner.Autotuner.run, rt._RUNTIME = saved
        for name, check in checks.items():
            setattr(validate, name, check)


def _trace_engine(level: str, dtype, gpu) -> None:
    """Run the engine of Qwen3.5-0.8B at `level` on the meta device: two prompt chunks and two decode steps."""
    from .config import QWEN35_0_8B
    from .demo import meta_weights
    from .engine import Engine, Sampling
    engine = Engine(QWEN35_0_8B, meta_weights(QWEN35_0_8B, dtype), max_seq_len=MAX_SEQ_LEN,
                    default_source="solutions", cuda_graph=False, prefill_chunk=PROMPT_CHUNK, level=level)
    # the kernels made for PDL where the GPU has it, launched with it (what the engine does on a CUDA device)
    engine.pdl_gpu = engine.pdl = gpu.pdl
    engine.prefill(list(range(PROMPT)))
    engine.decode()
    engine.decode(sampling=Sampling(temperature=0.8, top_k=50, top_p=0.9))


def _trace_autotune(dtype) -> None:
    """Chapter 26_autotune's autotuned GEMV (one token) and GEMM (a 128-token prompt, the chapters' prefill) at every
    projection of Qwen3.5-0.8B."""
    import torch

    from . import kernels
    from .config import QWEN35_0_8B
    from .demo import meta_weights
    from .engine.merged import merge_weights
    autotune = kernels.load("autotune", "solutions").module
    merged = merge_weights(QWEN35_0_8B, meta_weights(QWEN35_0_8B, dtype))
    shapes = {tuple(merged.lm_head.shape)}
    for layer in merged.layers:
        shapes |= {tuple(w.shape) for w in (layer.mixer_in.weight, layer.mixer_out, layer.gate_up.weight, layer.down)}
    for N, K in sorted(shapes):
        w = torch.empty(N, K, dtype=dtype, device="meta")
        autotune.autotuned_gemv(torch.empty(K, dtype=dtype, device="meta"), w)
        autotune.autotuned_gemm(torch.empty(128, K, dtype=dtype, device="meta"), w)


def _expand(launches: list[tuple], backend, where: str) -> list[dict]:
    """Each recorded launch typed by Triton's binder for the target (an autotuned one: once per config its
    pruning keeps): {kernel, signature, constexprs, attrs, options, pdl, where}."""
    out = []
    for fn, tuner, args, kwargs in launches:
        runs = [kwargs]
        if tuner is not None:
            tuner.nargs = dict(zip(tuner.arg_names, args))     # what the autotuner's pruning reads
            configs = tuner.prune_configs(kwargs)
            runs = [{**kwargs, **c.all_kwargs()} for c in configs]
        for kw in runs:
            binder = _binder(fn, backend)
            bound, specialization, options = binder(*args, **kw)
            options, signature, constexprs, attrs = fn._pack_args(backend, kw, bound, specialization, options)
            pdl = bool(kw.get("launch_pdl")) or bool(kw.get("PDL"))
            out.append(dict(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs, options=options,
                            pdl=pdl, where=where))
    return out


_BINDERS: dict = {}


def _binder(fn, backend):
    from triton.runtime.jit import create_function_from_signature
    key = (id(fn), id(backend))
    if key not in _BINDERS:
        _BINDERS[key] = create_function_from_signature(fn.signature, fn.params, backend)
    return _BINDERS[key]


_COMPILED: dict = {}      # (kernel, arch, signature, constexprs, attrs, options) -> resources: one compile each


def _compile(launch: dict, target) -> dict:
    """Compile one typed launch for `target`: its shared memory, registers and local memory, or its error."""
    import triton
    from triton.compiler import ASTSource

    from .lowering import _resources
    fn = launch["fn"]
    consts = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
              for k, v in launch["constexprs"].items()}
    key = (fn.fn.__module__, fn.__name__, target.arch, repr(sorted(launch["signature"].items())),
           repr(sorted(consts.items(), key=str)), repr(sorted(launch["attrs"].items(), key=str)),
           repr(sorted(launch["options"].__dict__.items())))
    if key not in _COMPILED:
        try:
            compiled = triton.compile(ASTSource(fn, launch["signature"], launch["constexprs"], launch["attrs"]),
                                      target=target, options=launch["options"].__dict__)
            res = _resources(compiled.asm["cubin"])
            _COMPILED[key] = {"shared_bytes": int(compiled.metadata.shared), "registers": res.get("REG", 0),
                              "local_bytes": res.get("LOCAL", 0), "error": ""}
        except Exception as e:   # a compile that fails is a finding for that GPU, reported with its message
            line = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            _COMPILED[key] = {"shared_bytes": 0, "registers": 0, "local_bytes": 0,
                              "error": f"{type(e).__name__}: {line[:200]}"}
    return _COMPILED[key]


def _problems(k: Kernel, gpu, error: str) -> list[str]:
    problems = [f"does not compile: {error}"] if error else []
    if k.shared_bytes > gpu.shared_bytes:
        problems.append(f"shared memory {k.shared_bytes:,} B > {gpu.shared_bytes:,}")
    if k.registers > gpu.registers_per_thread:
        problems.append(f"{k.registers} registers a thread > {gpu.registers_per_thread}")
    if k.registers * 32 * k.num_warps > gpu.registers_per_sm:
        problems.append(f"{k.registers} registers x {32 * k.num_warps} threads > {gpu.registers_per_sm:,} of an SM")
    if k.pdl and not gpu.pdl:
        problems.append(f"launched with PDL, which sm_{gpu.capability} lacks")
    return problems


def survey_here(archs=None, dtypes=None, levels=LEVELS, autotune: bool = True) -> list[Kernel]:
    """`survey` in this process, which must not be interpreting (see the module doc)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("the survey compiles for GPUs: run it without TRITON_INTERPRET (`survey` does)")
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    from .triton_helpers import GPUS
    archs, dtypes, levels = _checked(archs, dtypes, levels)
    kernels: dict = {}
    for arch in archs:
        gpu = GPUS[arch]
        target = GPUTarget("cuda", arch, 32)
        backend = make_backend(target)
        for dtype_name in dtypes:
            if dtype_name not in gpu.dtypes:
                continue
            dtype = getattr(torch, dtype_name)
            typed = []
            for level in levels:
                with _recording(gpu, dtype_name) as launches:
                    _trace_engine(level, dtype, gpu)
                    typed += _expand(launches, backend, level)
            if autotune:        # pruned as on that GPU: inside the recording
                with _recording(gpu, dtype_name) as launches:
                    _trace_autotune(dtype)
                    typed += _expand(launches, backend, "autotune")
            for launch in typed:
                res = _compile(launch, target)
                consts = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v))
                          for k, v in launch["constexprs"].items()}
                consts = {(k[0] if isinstance(k, tuple) and len(k) == 1 else str(k)): v for k, v in consts.items()}
                names = launch["fn"].arg_names
                consts = {names[k] if isinstance(k, int) else k: v for k, v in consts.items()}
                opts = launch["options"]
                key = (launch["fn"].__name__, arch, dtype_name, repr(sorted(consts.items(), key=str)),
                       repr(sorted(launch["signature"].items())), opts.num_warps, opts.num_stages, launch["pdl"])
                if key not in kernels:
                    k = Kernel(launch["fn"].__name__, arch, dtype_name, [], consts, opts.num_warps, opts.num_stages,
                               launch["pdl"], res["shared_bytes"], res["registers"], res["local_bytes"])
                    k.problems = _problems(k, gpu, res["error"])
                    k.pointers = sorted({t[1:] for t in launch["signature"].values()
                                         if isinstance(t, str) and t.startswith("*")})
                    kernels[key] = k
                if launch["where"] not in kernels[key].where:
                    kernels[key].where.append(launch["where"])
    return list(kernels.values())


def _checked(archs, dtypes, levels, names=("archs", "dtypes", "levels")):
    """The three lists (None: every one), each refused when empty or naming what is not there, by `names` (the
    keywords of `survey`, or the command line's options)."""
    from .triton_helpers import GPUS
    lists = (list(GPUS) if archs is None else [int(a) for a in archs],
             list(DTYPE_NAMES) if dtypes is None else list(dtypes), list(levels))
    for name, given, known in zip(names, lists, (list(GPUS), list(DTYPE_NAMES), list(LEVELS))):
        bad = [v for v in given if v not in known]
        if bad or not given:
            raise ValueError(f"{name} {bad or 'empty'}: choose from {known}")
    if not any(d in GPUS[a].dtypes for a in lists[0] for d in lists[1]):   # a T4 in bf16: nothing to compile
        runs = "; ".join(f"sm_{a} runs {', '.join(GPUS[a].dtypes)}" for a in lists[0])
        raise ValueError(f"{names[0]} {lists[0]} and {names[1]} {lists[1]} leave nothing to compile: no GPU asked "
                         f"for runs a dtype asked for ({runs})")
    return lists


def survey(archs=None, dtypes=None, levels=LEVELS, autotune: bool = True) -> list[Kernel]:
    """Every distinct launch of the engine (at `levels`) and of chapter 26_autotune's autotuned projections, compiled
    for each GPU of `archs` (`triton_helpers.GPUS`; None: all) in each dtype of `dtypes` that GPU runs, with
    its resources and the limits it breaks (`Kernel.problems`, empty where it fits). Under the interpreter it
    runs in a fresh process without it."""
    _checked(archs, dtypes, levels)
    if os.environ.get("TRITON_INTERPRET") != "1":
        return survey_here(archs, dtypes, levels, autotune)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                         *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as tmp:
        answer = Path(tmp) / "kernels.json"
        request = json.dumps({"archs": archs, "dtypes": dtypes, "levels": list(levels), "autotune": autotune})
        run = subprocess.run([sys.executable, "-m", "tritonllm_course.targets", request, str(answer)], env=env,
                             capture_output=True, text=True, timeout=3600)
        if run.returncode != 0 or not answer.exists():
            tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-25:])
            raise RuntimeError(f"the survey failed in its process (exit {run.returncode}):\n{tail}")
        return [Kernel(**k) for k in json.loads(answer.read_text())]


def table(kernels: list[Kernel]) -> str:
    """One line per kernel and GPU: resources, where it runs, and its problems (or "ok")."""
    from .triton_helpers import GPUS
    lines = []
    for arch in sorted({k.arch for k in kernels}):
        gpu = GPUS[arch]
        for dtype in DTYPE_NAMES:
            rows = sorted((k for k in kernels if k.arch == arch and k.dtype == dtype), key=lambda k: k.label())
            if not rows:
                continue
            bad = sum(1 for k in rows if k.problems)
            lines += ["", f"sm_{arch} ({gpu.name}: {gpu.shared_bytes // 1024} KB shared a block, "
                          f"{'PDL' if gpu.pdl else 'no PDL'}) {dtype}: {len(rows)} kernels, "
                          f"{bad} beyond its limits",
                      f"  {'kernel':<72}{'shared':>9}{'regs':>6}{'spill':>7}  where"]
            for k in rows:
                verdict = "; ".join(k.problems) if k.problems else ""
                lines.append(f"  {k.label():<72}{k.shared_bytes:>9,}{k.registers:>6}{k.local_bytes:>7}  "
                             f"{', '.join(k.where)}" + (f"  <- {verdict}" if verdict else ""))
    return "\n".join(lines).lstrip("\n")


def _list(text: str, name: str, convert=str, what: str = "names") -> list:
    try:
        return [convert(v) for v in text.split(",") if v]
    except ValueError:
        raise ValueError(f"--{name}: expected a comma-separated list of {what}, got {text!r}") from None


def _is_targets_json(path: Path) -> bool:
    """Whether `path` holds what `--json` writes: a list of kernels, each naming its kernel, arch and dtype."""
    try:
        data = json.loads(read_regular(path))
    except (UnreadableFile, ValueError):
        return False
    return isinstance(data, list) and all(isinstance(k, dict) and {"name", "arch", "dtype"} <= set(k) for k in data)


def _check_json(name: str) -> None:
    """`--json` refused before the survey, with a ValueError naming it: a folder that is missing or
    read-only, a symbolic link, a path in the learner's exercises/, solutions/ or notebooks/, or an existing
    file that is not an earlier `--json` (what the learner wrote is kept)."""
    path = Path(name)
    if not name.strip():   # '' was taken for no --json: the figures asked for were never written
        raise ValueError(f"--json: {name!r} names no file; name the file to write")
    if not path.parent.is_dir():
        raise ValueError(f"--json: the folder of {name} does not exist")
    if path.is_dir():
        raise ValueError(f"--json: {name} is a folder; name the file to write")
    try:
        real = check_writable(path, path.parent)   # a link (dangling or not) or a read-only folder: refused
    except UnsafeWrite as e:
        raise ValueError(f"--json: {e}") from None
    from .kernels import course_root
    root = resolved(course_root())
    for kept in ("exercises", "solutions", "notebooks"):
        if real.is_relative_to(root / kept):
            raise ValueError(f"--json: {name} is in the course's {kept}/ folder; write the figures elsewhere")
    if real.exists() and not _is_targets_json(real):
        raise ValueError(f"--json: {name} exists and is not an earlier `targets --json` file: not overwritten")


def add_targets_parser(sub):
    p = sub.add_parser("targets", help="compile every kernel for sm_75/80/86/89/90 and check its limits (CPU)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default=None, help="compute capabilities, e.g. 75,89 (default: 75,80,86,89,90)")
    p.add_argument("--dtype", default=None, help="bfloat16 and/or float16 (default: each the GPU runs)")
    p.add_argument("--level", default=",".join(LEVELS), help=f"engine levels (default: {','.join(LEVELS)})")
    p.add_argument("--no-autotune", dest="autotune", action="store_false",
                   help="leave out chapter 26_autotune's autotuned projections")
    p.add_argument("--json", default=None, help="also write every kernel's figures to this file")
    p.set_defaults(func=run_targets)
    return p


def run_targets(args) -> int:
    """Exit 0 when every kernel fits every GPU asked for, 1 when one does not, 2 for bad arguments."""
    try:
        archs = None if args.arch is None else _list(args.arch, "arch", int,
                                                     "compute capabilities as numbers (e.g. 75,89)")
        dtypes = None if args.dtype is None else _list(args.dtype, "dtype")
        levels = _list(args.level, "level")
        _checked(archs, dtypes, levels, names=("--arch", "--dtype", "--level"))
        if args.json is not None:                       # refused before the survey's minutes, not after
            _check_json(args.json)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    found = survey(archs, dtypes, levels, args.autotune)
    print(table(found))
    bad = [k for k in found if k.problems]
    print(f"\n{len(found)} kernel compilations, {len(bad)} beyond their GPU's limits")
    if args.json is not None:
        try:
            atomic_write_text(args.json, json.dumps([asdict(k) for k in found], indent=1) + "\n")
        except UnsafeWrite as e:   # changed during the survey (checked before it)
            print(f"--json: {e}", file=sys.stderr)
            return 2
    return 1 if bad else 0


if __name__ == "__main__":           # the fresh process of `survey`: request (JSON) -> answer file
    req = json.loads(sys.argv[1])
    found = survey_here(req["archs"], req["dtypes"], req["levels"], req["autotune"])
    Path(sys.argv[2]).write_text(json.dumps([asdict(k) for k in found]))
