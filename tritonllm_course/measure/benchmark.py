"""`bench`: how fast is a kernel, against PyTorch eager and torch.compile on the same inputs, and
against the memory-bandwidth ceiling of this GPU.

Baselines. A ratio is only as honest as the baseline it divides by, so every result names its strongest
baseline: the fastest of the implementations timed that are not the course's kernel (eager, which for a
matmul is cuBLAS through `torch.matmul`; torch.compile's default mode; with `max_autotune=True`, torch.compile
in max-autotune mode, which also tries Triton templates for the matmuls). A baseline that fails to compile or
to run is recorded with its error in `BenchResult.failed` and left out, rather than ending the whole table.

Timing method. Decode kernels run for microseconds, so a plain loop of launches from Python would time
the launch overhead, and re-using one input would time the L2 cache (50 MB on an H200) instead of HBM. Each
implementation is therefore captured in a CUDA graph that calls it on `copies` independent sets
of inputs (enough to pass 256 MiB, at most 64: larger than L2 where a call moves more than about
0.8 MB; a decode kernel of kilobytes is timed with its 64 sets in L2), the graph is replayed several
times, and the median time per call is reported. The ceiling is a device-to-device copy of 2 GiB
(bytes read + written), measured once per GPU and cached.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from .. import kernels, slots
from ..engine.graph import capture
from ..runtime import gpu_available, runtime, setup
from ..safe_files import atomic_write_text, check_out_folder, results_folder
from ..validate import flag

MAX_AUTOTUNE_LABEL = "torch.compile max-autotune"
NOT_TRIED = "not tried"     # how a baseline ruled out at a shape begins its entry in `BenchResult.failed`
CACHE_DIR = Path.home() / ".cache" / "tritonllm_course"
L2_FLUSH_BYTES = 256 * 2**20


def skipped(what: str = "timing") -> bool:
    """True (after saying why) when there is no GPU to time on."""
    if runtime().on_gpu:
        return False
    print(f"{what} skipped: no GPU here (the Triton interpreter runs kernels on the CPU, ~1000x slower; "
          "its times say nothing about a GPU)")
    return True


def _median_event_time(fn, reps: int) -> float:
    """Median milliseconds of `fn()` over `reps` runs, timed with CUDA events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def ceiling_gbps(refresh: bool = False) -> float:
    """Measured device-to-device copy bandwidth in GB/s (read + write), cached per GPU."""
    name = torch.cuda.get_device_name()
    path = CACHE_DIR / "ceiling.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    if name in cache and not refresh:
        return cache[name]
    n = 2**30  # 1 GiB each way
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    ms = _median_event_time(lambda: dst.copy_(src), 15)
    cache[name] = 2 * n / (ms * 1e-3) / 1e9
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(cache, indent=1))
    return cache[name]


class RecordedCeiling(NamedTuple):
    """A copy ceiling on record: GB/s (read + write), the GPU and the date it was measured on, its file."""
    gbps: float
    gpu: str
    date: str
    path: Path

    def __str__(self) -> str:
        return (f"{self.gbps:,.0f} GB/s (measured copy, {self.gpu}, {self.date}; "
                f"{self.path.parent.name}/{self.path.name})")


def recorded_ceiling(folder: str | Path | None = None) -> RecordedCeiling:
    """The copy ceiling on record, without a GPU: the one of the newest kernel table in `folder` (default:
    the course's results/), `kernels_<gpu>_<date>.json`, newest by the date in its name.

    The kernel table's, because it is the measurement the per-kernel "% of ceiling" of docs/results.md §5
    divides by (each row stores it as `ceiling_gbps`); the engine benchmarks (`engine_*/bench.json`) measure
    their own copy in their run, within a fraction of a percent of it. A chapter's floor (bytes / bandwidth)
    reads it here, `nbytes / (recorded_ceiling().gbps * 1e9)`, rather than a number written by hand.
    Raises FileNotFoundError if no kernel table there records one.
    """
    folder = Path(folder) if folder is not None else kernels.course_root() / "results"
    tables = sorted(folder.glob("kernels_*.json"), key=lambda p: (p.stem.rsplit("_", 1)[-1], p.name))
    for path in reversed(tables):
        data = json.loads(path.read_text())
        rows = [r for r in data.get("results", []) if r.get("ceiling_gbps")]
        if rows:
            return RecordedCeiling(rows[0]["ceiling_gbps"], data.get("gpu", rows[0].get("gpu", "?")),
                                   data.get("date", path.stem.rsplit("_", 1)[-1]), path)
    raise FileNotFoundError(f"no kernel table in {folder} records a copy ceiling (kernels_<gpu>_<date>.json, "
                            "made on a GPU by `python -m tritonllm_course.measure.kernel_table --out results/`)")


def time_calls(call, input_sets: list[dict], reps: int = 20) -> float:
    """Microseconds per `call(**inputs)`, replayed from a CUDA graph over several input sets."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for inputs in input_sets[:2]:   # warm-up: compile and autotune outside the capture
            call(**inputs)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    capture(graph, lambda: [call(**inputs) for inputs in input_sets])
    graph.replay()
    ms = _median_event_time(graph.replay, reps)
    return ms * 1e3 / len(input_sets)


@dataclass
class BenchResult:
    name: str
    shape: dict
    dtype: str
    bytes: int
    flops: int | None
    ceiling_gbps: float
    gpu: str
    times_us: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)   # baseline -> "ErrorType: message"

    def strongest_baseline(self) -> str | None:
        """The fastest implementation timed that is not the course's kernel (None if only the kernel ran)."""
        return fastest(self.times_us, lambda impl: not impl.startswith("triton"))

    def gbps(self, impl: str) -> float:
        return self.bytes / (self.times_us[impl] * 1e-6) / 1e9

    def rows(self) -> list[dict]:
        base = self.times_us.get("torch eager")
        strongest = self.strongest_baseline()
        out = []
        for impl, us in self.times_us.items():
            row = {"impl": impl, "time_us": us, "GB/s": self.gbps(impl),
                   "% of ceiling": 100 * self.gbps(impl) / self.ceiling_gbps}
            if self.flops:
                row["TFLOP/s"] = self.flops / (us * 1e-6) / 1e12
            if base:
                row["speed-up vs eager"] = base / us
            if strongest:
                row["speed-up vs strongest"] = self.times_us[strongest] / us
            out.append(row)
        return out

    def __str__(self) -> str:
        shape = ", ".join(f"{k}={v}" for k, v in self.shape.items())
        lines = [f"{self.name} | {shape} | {self.dtype} | {self.bytes / 1e6:.2f} MB moved | {self.gpu}, "
                 f"ceiling {self.ceiling_gbps:.0f} GB/s (measured copy)"]
        for r in self.rows():
            extra = f"  {r['speed-up vs eager']:5.2f}x eager" if "speed-up vs eager" in r else ""
            lines.append(f"  {r['impl']:<16} {r['time_us']:9.2f} us  {r['GB/s']:7.0f} GB/s  "
                         f"{r['% of ceiling']:5.1f}% of ceiling{extra}")
        strongest = self.strongest_baseline()
        if strongest:
            lines.append(f"  strongest baseline: {strongest}")
        for impl, why in self.failed.items():
            lines.append(f"  {impl}: failed, not timed ({why})")
        return "\n".join(lines)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731

    def as_dict(self) -> dict:
        return {"name": self.name, "shape": self.shape, "dtype": self.dtype, "bytes": self.bytes,
                "flops": self.flops, "gpu": self.gpu, "ceiling_gbps": self.ceiling_gbps,
                "strongest_baseline": self.strongest_baseline(), "failed": dict(self.failed),
                "rows": self.rows()}

    @classmethod
    def from_dict(cls, d: dict) -> "BenchResult":
        """The result `as_dict` wrote (a kernel table resumed from its JSON)."""
        return cls(d["name"], d["shape"], d["dtype"], d["bytes"], d["flops"], d["ceiling_gbps"], d["gpu"],
                   {r["impl"]: r["time_us"] for r in d["rows"]}, dict(d.get("failed", {})))

    def plot(self, ax=None):
        import matplotlib.pyplot as plt
        ax = ax or plt.subplots(figsize=(6, 3))[1]
        impls = list(self.times_us)
        pct = [100 * self.gbps(i) / self.ceiling_gbps for i in impls]
        bars = ax.barh(impls, pct, color=["tab:orange" if i.startswith("triton") else "tab:blue" for i in impls])
        for bar, i in zip(bars, impls):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {self.times_us[i]:.1f} us",
                    va="center")
        ax.axvline(100, color="k", lw=0.8)
        ax.set_xlabel(f"% of measured bandwidth ({self.ceiling_gbps / 1000:.2f} TB/s)")
        ax.set_title(f"{self.name} on {self.gpu}")
        ax.invert_yaxis()
        return ax


def max_autotune_refusal(slot, shape: dict) -> str | None:
    """Why max-autotune is not tried on this slot at this shape, or None. A slot sets
    extra["max_autotune_max"] = {dim: largest} where Inductor's max-autotune compile of its torch reference runs
    for minutes (the chunked delta rule's loop over chunks, each product tuned anew); the row then records
    the baseline as not tried, with the measured reason from extra["max_autotune_why"]."""
    over = {k: shape[k] for k, most in slot.extra.get("max_autotune_max", {}).items() if shape[k] > most}
    if not over:
        return None
    dims = ", ".join(f"{k} = {v}" for k, v in over.items())
    return f"{NOT_TRIED} at {dims}: {slot.extra['max_autotune_why']}"


def bench(name: str, source: str | None = None, *, shape: dict | None = None, dtype=None,
          compile: bool = True, max_autotune: bool = False, extra: dict | None = None,
          verbose: bool = True) -> BenchResult | None:
    """Time a slot's kernel against PyTorch eager (and torch.compile) on the same inputs.

    max_autotune: also time torch.compile in max-autotune mode (`MAX_AUTOTUNE_LABEL`). Off by default because
    its autotuning takes tens of seconds a shape; the kernel table turns it on. It is compiled with
    "max-autotune-no-cudagraphs": the same autotuning, without Inductor's own CUDA graphs, which cannot be
    captured inside the graph every implementation here is timed in (the launch cost is removed for all
    implementations alike by that graph).
    extra: more implementations to time, {label: callable taking the slot's input kwargs}.
    A baseline that raises while compiling or timing is recorded in `failed` and printed; the course's
    kernel raising is an error. Returns None (after saying why) on a machine without a GPU.
    """
    flag(max_autotune, "max_autotune")
    slot = slots.get(name)
    rt = runtime()
    given = None if shape is None else slot.given_shape(rt.preset, shape, strict=False)   # refused before the skip
    kernels.selected(source)
    if extra is not None and not (isinstance(extra, dict) and all(map(callable, extra.values()))):
        raise TypeError(f"extra must be a dict of {{label: callable}}, got {extra!r}")
    if skipped(f"bench {name}"):
        return None
    dtype = dtype or rt.dtype
    shape = given or slot.shape(rt.preset)
    loaded = kernels.load(slot.family, source, slot.function)
    kernel = getattr(loaded.module, slot.function)
    torch_fn = slot.torch_impl or slot.reference

    gen = torch.Generator(device="cuda").manual_seed(0)
    probe = slot.make_inputs(shape, dtype, "cuda", gen)
    moved = slot.bytes(probe) if slot.bytes else slots.tensor_bytes(
        *probe.values(), *(slot.make_out(probe).values() if slot.make_out else ()))
    copies = max(1, min(64, math.ceil(L2_FLUSH_BYTES / max(moved, 1))))
    sets = [probe] + [slot.make_inputs(shape, dtype, "cuda", gen) for _ in range(copies - 1)]
    out_sets = [slot.make_out(s) if slot.make_out else {} for s in sets]
    kernel_sets = [{**s, **o} for s, o in zip(sets, out_sets)]

    label = "triton (yours)" if loaded.source == "exercises" else "triton"
    impls = {label: (kernel, kernel_sets), "torch eager": (torch_fn, sets)}
    refusal = max_autotune_refusal(slot, shape) if compile and max_autotune else None
    if compile:
        impls["torch.compile"] = (torch.compile(torch_fn, dynamic=False), sets)
        if max_autotune and refusal is None:
            impls[MAX_AUTOTUNE_LABEL] = (torch.compile(torch_fn, dynamic=False,
                                                       mode="max-autotune-no-cudagraphs"), sets)
    for key, fn in (extra or {}).items():
        impls[key] = (fn, sets)
    result = BenchResult(name, dict(shape), str(dtype).replace("torch.", ""), moved,
                         slot.flops(probe) if slot.flops else None, ceiling_gbps(),
                         torch.cuda.get_device_name())
    if refusal is not None:
        result.failed[MAX_AUTOTUNE_LABEL] = refusal
    for impl, (fn, input_sets) in impls.items():
        if impl == label:
            result.times_us[impl] = time_calls(fn, input_sets)
            continue
        try:
            result.times_us[impl] = time_calls(fn, input_sets)
        except Exception as e:  # a baseline that does not compile or run here: recorded, the table goes on
            result.failed[impl] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            torch.cuda.synchronize()
    if verbose:
        print(result)
    return result


def save_results(results: list[BenchResult], path: str | Path) -> Path:
    """Write results as JSON (for the results folder and the README's tables)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps([r.as_dict() for r in results], indent=1))
    return path


def sweep(name: str, shapes: list[dict], source: str | None = None, compile: bool = True,
          verbose: bool = False) -> list[BenchResult] | None:
    """`bench` over several shapes (e.g. growing n), for a bandwidth-versus-size plot."""
    if skipped(f"sweep {name}"):
        return None
    results = [bench(name, source, shape=s, compile=compile, verbose=verbose) for s in shapes]
    return results


def plot_sweep(results: list[BenchResult], x_key: str, ax=None):
    """GB/s of every implementation against the swept size, with the measured ceiling."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    xs = [r.shape[x_key] for r in results]
    for impl in results[0].times_us:
        ax.plot(xs, [r.gbps(impl) for r in results], marker="o", label=impl)
    ax.axhline(results[0].ceiling_gbps, color="k", ls="--", lw=0.8, label="measured copy ceiling")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x_key)
    ax.set_ylabel("GB/s")
    ax.set_title(f"{results[0].name} on {results[0].gpu} ({results[0].dtype})")
    ax.legend()
    return ax


def gpu_tag() -> str:
    """The GPU's name for file names: 'NVIDIA H200' -> 'nvidia-h200'."""
    return torch.cuda.get_device_name().lower().replace(" ", "-")


def fastest(times: dict, admits=lambda name: True) -> str | None:
    """The name of the fastest timing that `admits(name)` lets in: the strongest baseline of a table, the
    course's own kernels left out by the caller. A failed implementation (its error as a string) never wins;
    None when nothing admitted ran."""
    timed = {name: t for name, t in times.items() if admits(name) and not isinstance(t, str)}
    return min(timed, key=timed.get) if timed else None


def results_stem(out: str | Path, name: str) -> tuple[Path, str]:
    """(out/<name>_<gpu>_<date>, date): where a GPU script writes its .json, .md and .png."""
    date = datetime.date.today().isoformat()
    out = results_folder(out)
    return out / f"{name}_{gpu_tag()}_{date}", date


def gpu_script(doc: str, argv=None, add_args=None, check=None):
    """The command line every GPU benchmark script shares: `--out DIR` (and `add_args(parser)`'s).
    Returns (args, runtime), or None after saying why when there is no GPU. `check(args)` raises a ValueError
    for an option the script cannot run: said in one line (exit 2) before the GPU's test, so a bad option is
    named on any machine, not only after a GPU has been found for it."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="results", help="folder for the JSON, markdown and PNG results")
    if add_args:
        add_args(ap)
    args = ap.parse_args(argv)
    try:
        check_out_folder(args.out)     # a file or a dangling link in the way: said before any work
        if check is not None:
            check(args)
    except ValueError as e:            # UnsafeWrite is one
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if not gpu_available():   # said before `setup`, which on a CPU refuses the triton these scripts import first
        print(f"{doc.strip().splitlines()[0]}\nneeds a GPU: nothing measured")
        return None
    return args, setup()
