"""How a Triton kernel becomes GPU code (chapter 28_compilers): compile one of the course's kernels for a GPU that need
not be here, and read what each stage of the compiler wrote.

    @triton.jit Python -> TTIR -> TTGIR -> LLVM IR -> PTX -> cubin, read back as SASS

`triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32))` runs the
whole pipeline without a GPU: ptxas, cuobjdump and nvdisasm ship inside the triton wheel
(triton/backends/nvidia/bin), so a CPU machine prints an H200's SASS too. Under the CPU interpreter
(TRITON_INTERPRET=1) `@triton.jit` returns an InterpretedFunction, which runs the kernel's Python on numpy
arrays and lowers nothing, and triton.language's own jit functions (tl.sum, tl.sigmoid) are interpreted
ones as well. So there the lowering runs in a fresh Python process without the interpreter, which imports
the kernel's module from its file; on a GPU machine it runs in this process.

A launch also tells the compiler what it knows of the arguments: pointers 16-byte aligned, integers that
are multiples of 16 (`tt.divisibility = 16`). Without that, loads cannot be vectorised. `lower` passes
the same hints: every pointer is taken as aligned (as PyTorch's allocations are), an integer given as a
value gets the hint when it is a multiple of 16, as the launcher would give it.

Checked with triton 3.6.0 and 3.7.1, whose `ASTSource` takes constexprs by name.
"""
from __future__ import annotations

import difflib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

STAGES = ("ttir", "ttgir", "llir", "ptx", "sass")


@dataclass
class Lowered:
    """One kernel compiled for one GPU: the text of every stage and what the compiler reported."""
    name: str
    arch: int
    constexprs: dict
    options: dict                                  # num_warps, num_stages: what the compile used
    asm: dict = field(default_factory=dict)        # stage -> text (STAGES)
    resources: dict = field(default_factory=dict)  # REG (registers a thread), LOCAL (spilled bytes), SHARED

    def lines(self, stage: str, pattern: str) -> list[str]:
        """The lines of `stage` that match the regular expression `pattern`, stripped."""
        if stage not in self.asm:
            raise KeyError(f"no stage {stage!r}; stages: {list(self.asm)}")
        rx = re.compile(pattern)
        return [ln.strip() for ln in self.asm[stage].splitlines() if rx.search(ln)]

    def count(self, stage: str, pattern: str) -> int:
        return len(self.lines(stage, pattern))

    def instructions(self) -> int:
        """SASS instructions of the kernel (NOPs of the padding at the end not counted)."""
        return sum(1 for ln in self.asm["sass"].splitlines()
                   if re.search(r"\t[A-Z]", ln) and not re.search(r"\tNOP\b", ln))

    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.constexprs.items())
        return f"{self.name}[{shown}] num_warps={self.options['num_warps']} num_stages={self.options['num_stages']}"

    def __str__(self) -> str:
        sizes = ", ".join(f"{s} {len(self.asm[s].splitlines())} lines" for s in STAGES if s in self.asm)
        res = " ".join(f"{k}={v}" for k, v in self.resources.items())
        return f"{self.label()} for sm_{self.arch}: {sizes}; {res}"

    __repr__ = __str__


def diff(a: Lowered, b: Lowered, stage: str, pattern: str = "", context: int = 0) -> list[str]:
    """The lines of `stage` that differ between two compilations (only those matching `pattern`), as a
    unified diff without its header; SSA names (%12, %arg3) are kept as they are."""
    la = a.lines(stage, pattern) if pattern else a.asm[stage].splitlines()
    lb = b.lines(stage, pattern) if pattern else b.asm[stage].splitlines()
    out = list(difflib.unified_diff(la, lb, a.label(), b.label(), n=context, lineterm=""))
    return [ln for ln in out[2:] if not ln.startswith("@@")]


def lower(kernel, signature: dict, constexprs: dict | None = None, *, num_warps: int = 4, num_stages: int = 3,
          arch: int = 90) -> Lowered:
    """Compile `kernel` for sm_`arch` and return every stage.

    kernel:     a @triton.jit function defined in a .py file (a solution's, or triton_helpers'); under the
                interpreter it is recompiled from that file in a fresh process
    signature:  {argument: type} for the arguments that are not constexprs: "*bf16" / "*fp16" / "*fp32"
                pointers, "i32", "fp32", or an int value (typed i32, with the launcher's divisibility hint
                when it is a multiple of 16)
    constexprs: {argument: value} for the tl.constexpr arguments; those left out take their defaults
    """
    return lower_many([dict(kernel=kernel, signature=signature, constexprs=constexprs or {}, num_warps=num_warps,
                            num_stages=num_stages, arch=arch)])[0]


def lower_many(requests: list[dict]) -> list[Lowered]:
    """`lower` for several kernels or configurations (each a dict of `lower`'s arguments), compiled in one
    process: under the interpreter one fresh process for all of them, else this one."""
    specs = [_spec(**r) for r in requests]
    if not _interpreted():
        return [_from_json(_compile(r["kernel"], s)) for r, s in zip(requests, specs)]
    for s in specs:
        if s["path"] is None:
            raise ValueError(f"{s['name']} is not defined in a .py file: under the interpreter it is lowered in a "
                             "fresh process, which imports it from its module, so define it in one")
    return [_from_json(r) for r in _compile_apart(specs)]


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _spec(kernel, signature, constexprs=None, num_warps=4, num_stages=3, arch=90) -> dict:
    """The request as JSON-ready data: where the kernel's module is (None outside a file), and the rest."""
    fn = getattr(kernel, "fn", kernel)                  # JITFunction and InterpretedFunction both keep .fn
    if not inspect.isfunction(fn):
        raise TypeError(f"kernel must be a @triton.jit function, got {type(kernel).__name__}")
    for name, value in signature.items():
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise TypeError(f"signature[{name!r}] must be a type string or an int, got {value!r}")
    _full_signature(fn, signature, constexprs or {})          # a missing or unknown argument: named here
    path = inspect.getsourcefile(fn)
    in_file = path is not None and path.endswith(".py") and Path(path).is_file()
    return {"path": str(Path(path).resolve()) if in_file else None, "name": fn.__name__,
            "signature": dict(signature), "constexprs": dict(constexprs or {}), "num_warps": int(num_warps),
            "num_stages": int(num_stages), "arch": int(arch)}


def _compile_apart(specs: list[dict]) -> list[dict]:
    """Run `compile_specs` in a fresh Python process without the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    package_root = str(Path(__file__).resolve().parents[1])          # the course on the child's path too
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        request.write_text(json.dumps(specs))
        run = subprocess.run([sys.executable, "-m", "tritonllm_course.lowering", str(request), str(answer)],
                             env=env, capture_output=True, text=True, timeout=600)
        if run.returncode != 0 or not answer.exists():
            tail = "\n".join((run.stderr or run.stdout).strip().splitlines()[-25:])
            raise RuntimeError(f"lowering failed in its process (exit {run.returncode}):\n{tail}")
        return json.loads(answer.read_text())


def _import_file(path: str):
    name = "tritonllm_lowered_" + re.sub(r"\W", "_", Path(path).stem)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _full_signature(fn, signature: dict, constexprs: dict):
    """(signature with every argument typed, constexprs with the defaults filled in, attrs): the types and
    hints a launch would give. fn: the kernel's Python function."""
    params = inspect.signature(fn).parameters
    sig, consts, attrs = {}, {}, {}
    for i, (name, p) in enumerate(params.items()):
        if name in constexprs:
            sig[name], consts[name] = "constexpr", constexprs[name]
        elif name in signature:
            value = signature[name]
            if isinstance(value, int):
                sig[name] = "i32"
                if value % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
            else:
                sig[name] = value
                if value.startswith("*"):
                    attrs[(i,)] = [["tt.divisibility", 16]]
        elif p.default is not inspect.Parameter.empty:
            sig[name], consts[name] = "constexpr", p.default
        else:
            raise ValueError(f"{fn.__name__}: no type for argument {name!r}: give it in signature or constexprs")
    unknown = set(signature) | set(constexprs)
    unknown -= set(params)
    if unknown:
        raise ValueError(f"{fn.__name__} has no argument(s) {sorted(unknown)}")
    return sig, consts, attrs


def _resources(cubin: bytes) -> dict:
    """REG / LOCAL / SHARED of the kernel from `cuobjdump -res-usage` (the one shipped with triton)."""
    from triton import knobs
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", f.name], capture_output=True,
                             text=True).stdout
    found = dict(re.findall(r"\b(REG|LOCAL|SHARED|STACK):(\d+)", out))
    return {k: int(v) for k, v in found.items()}


def compile_specs(specs: list[dict]) -> list[dict]:
    """Compile each spec in this process, importing its kernel from its file (the fresh process's side)."""
    modules = {}
    for s in specs:
        if s["path"] not in modules:
            modules[s["path"]] = _import_file(s["path"])
    return [_compile(getattr(modules[s["path"]], s["name"]), s) for s in specs]


def _compile(fn, s: dict) -> dict:
    """Compile one kernel (a JITFunction: this process must not be interpreting); JSON-ready results."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    if not isinstance(fn, JITFunction):
        raise TypeError(f"{s['name']} is not a @triton.jit kernel here ({type(fn).__name__})")
    sig, consts, attrs = _full_signature(fn.fn, s["signature"], s["constexprs"])
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    except (TypeError, AssertionError):         # an older triton: constexprs keyed by (argument index,)
        src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in consts.items()},
                        attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", s["arch"], 32),
                              options={"num_warps": s["num_warps"], "num_stages": s["num_stages"]})
    asm = {stage: compiled.asm[stage] for stage in STAGES}      # "sass": cuobjdump + nvdisasm on the cubin
    resources = _resources(compiled.asm["cubin"])
    resources["shared_bytes"] = int(compiled.metadata.shared)
    return {"name": s["name"], "arch": s["arch"], "constexprs": _jsonable(consts),
            "options": {"num_warps": compiled.metadata.num_warps, "num_stages": compiled.metadata.num_stages},
            "asm": asm, "resources": resources}


def _jsonable(d: dict) -> dict:
    return {k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v) for k, v in d.items()}


def _from_json(r: dict) -> Lowered:
    return Lowered(name=r["name"], arch=r["arch"], constexprs=r["constexprs"], options=r["options"], asm=r["asm"],
                   resources=r["resources"])


if __name__ == "__main__":           # the fresh process of `_compile_apart`: request.json -> answer.json
    request, answer = sys.argv[1:3]
    Path(answer).write_text(json.dumps(compile_specs(json.loads(Path(request).read_text()))))
