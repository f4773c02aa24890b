"""Chapter 26_autotune's tools for watching an autotuner, and its GPU measurements.

On any machine (the interpreter included, where the course's CPU timer stands in for `do_bench`):
- `tuning_log(kernel)`: count what an autotuned kernel benchmarks inside a `with` block (configs timed,
  keys tuned);
- `label(config)`: a config in a few characters, e.g. "2x1024 w4 s3" (tile sizes, warps, stages);
- `retuning(at, lengths, key, N, K)`: a prompt-length sequence through the GEMM with a tuning key on M itself or
  on its bucket: how many tunings, how many configs timed, how long.

On a GPU (kernel times: CUDA-graph replays over input sets larger than L2, `benchmark.time_calls`):
- `config_table`: every GEMV config that survives pruning at one shape, timed; the autotuner's choice, its
  own `do_bench` times, the hand-picked config of chapter 05_projections, the first (tuning) and a cached call;
- `tuning_cost`: the first call's wall time against the number of configs, Triton's default `do_bench`
  against the course's shorter one;
- `disk_cache`: three fresh processes sharing one TRITON_CACHE_DIR (cold; compiled kernels cached;
  compiled kernels and `cache_results` timings cached);
- `capture_script`: a program that captures the autotuned GEMV in a CUDA graph, with or without a warm-up.

    python -m tritonllm_course.measure.autotune_bench --out results/     # on a GPU machine
"""
from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .benchmark import gpu_script, results_stem, time_calls
from ..runtime import runtime
from ..safe_files import atomic_write_text, save_figure

SHAPES = [(5120, 1024), (8224, 1024), (7168, 1024), (1024, 3584), (1024, 2048), (248320, 1024)]
CONFIG_COUNTS = (1, 2, 4, 8, 16)
PROMPT_LENGTHS = (77, 90, 100, 111, 120, 130, 150, 200, 250, 300)   # buckets 128, 256, 512; none % 16 == 0
GEMM_SHAPE = (5120, 1024)
DEVICE = None                                                      # None: the runtime's device


@dataclass
class TuningLog:
    """What an autotuner did inside `tuning_log`'s block: configs benchmarked, keys newly tuned."""
    kernel: object
    before: set
    benchmarks: int = 0

    @property
    def keys(self) -> list:
        return [k for k in self.kernel.cache if k not in self.before]

    def __str__(self) -> str:
        return f"{self.benchmarks} configs benchmarked, {len(self.keys)} new key(s) tuned"


@contextlib.contextmanager
def tuning_log(kernel):
    """Count the configs `kernel` (a `triton.autotune` kernel) benchmarks inside the block.

    The Autotuner times each config through its method `_bench`; an instance attribute of the same name
    wraps it for the block. Read `log.benchmarks` and `log.keys` inside or after the block."""
    log = TuningLog(kernel, set(kernel.cache))
    bench = kernel._bench

    def counted(*args, **kwargs):
        log.benchmarks += 1
        return bench(*args, **kwargs)

    kernel._bench = counted
    try:
        yield log
    finally:
        del kernel._bench                       # the class's method again


def label(config) -> str:
    """'2x1024 w4 s3': the config's block sizes in order, its warps and pipeline stages."""
    return "x".join(str(v) for v in config.kwargs.values()) + f" w{config.num_warps} s{config.num_stages}"


def same_config(config, params: dict) -> bool:
    """Is `config` the launch `params` ({BLOCK_*: ..., num_warps: ..., num_stages: ...}) of chapter 05_projections?"""
    want = {k: v for k, v in params.items() if k.startswith("BLOCK")}
    return (config.kwargs == want and config.num_warps == params["num_warps"]
            and config.num_stages == params.get("num_stages", 3))


def gemm_tuner(at, key: list[str]):
    """A fresh autotuner around the GEMM kernel of solutions/autotune.py, with its configs and pruning
    but its own `key` and an empty cache (the JIT function, and what it has compiled, is shared)."""
    import triton
    kernel = at.gemm_autotuned_kernel
    return triton.autotune(configs=kernel.configs, key=key, do_bench=kernel._do_bench,
                           prune_configs_by={"early_config_prune": kernel.early_config_prune})(kernel.fn)


def _device() -> str:
    return DEVICE or runtime().device


def _sync():
    if _device() == "cuda":
        torch.cuda.synchronize()


def retuning(at, lengths, key: list[str], N: int, K: int, dtype=None) -> dict:
    """Prompts of `lengths` tokens through a fresh autotuner of the GEMM keyed on `key` (["M", "N", "K"] or
    ["M_BUCKET", "N", "K"]): per prompt, whether it tuned, the configs it timed and its wall time."""
    import triton
    dtype = dtype or runtime().dtype
    tuner = gemm_tuner(at, key)
    gen = torch.Generator(device=_device()).manual_seed(0)
    x = torch.randn(max(lengths), K, generator=gen, device=_device()).to(dtype)
    w = (0.02 * torch.randn(N, K, generator=gen, device=_device())).to(dtype)
    y = torch.empty(max(lengths), N, dtype=dtype, device=_device())
    rows = []
    for M in lengths:
        def grid(meta):
            return triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"])
        with tuning_log(tuner) as log:
            t0 = time.perf_counter()
            tuner[grid](x[:M], w, y[:M], M, N, K, at.bucket_m(M))            # x[:M]: [M, K], contiguous
            _sync()
            seconds = time.perf_counter() - t0
        rows.append({"M": M, "tuned": bool(log.keys), "configs": log.benchmarks, "seconds": seconds})
    return {"key": key, "tunings": sum(r["tuned"] for r in rows), "configs": sum(r["configs"] for r in rows),
            "seconds": sum(r["seconds"] for r in rows), "prompts": rows}


# --- GPU ---------------------------------------------------------------------------------------------
def _input_sets(N, K, dtype, min_bytes=256 * 2**20):
    """x [1, K], weight [N, K], out [1, N]: enough copies to exceed L2 (the slot's make_inputs)."""
    from .. import slots
    slot = slots.get("in_proj.autotuned")
    gen = torch.Generator(device=_device()).manual_seed(N + K)
    copies = max(1, min(64, math.ceil(min_bytes / (N * K * dtype.itemsize))))
    sets = [slot.make_inputs({"M": 1, "N": N, "K": K}, dtype, _device(), gen) for _ in range(copies)]
    return [{**s, **slot.make_out(s)} for s in sets]


def _best_of(fn, sets, tries=3):
    return min(time_calls(fn, sets) for _ in range(tries))


def side_by_side(fns: dict, sets, tries=3) -> dict:
    """Best of `tries` microseconds of each callable, timed in turns (a, b, a, b, ...) so that anything else
    on the GPU slows them alike."""
    times = {name: [] for name in fns}
    for _ in range(tries):
        for name, fn in fns.items():
            times[name].append(time_calls(fn, sets))
    return {name: min(ts) for name, ts in times.items()}


def config_table(at, linear, N, K, dtype=torch.bfloat16) -> dict:
    """Every GEMV config kept by `select_gemv_configs` at [N, K]: microseconds each (CUDA-graph replay),
    with the autotuner's choice and its own do_bench milliseconds, chapter 05_projections's hand-picked config, and
    the wall time of the tuning first call and of a cached call."""
    import triton
    kernel = at.gemv_autotuned_kernel
    sms, _ = at.device_limits(torch.device(_device()))
    configs = at.select_gemv_configs(kernel.configs, N, K, sms)
    sets = _input_sets(N, K, dtype)
    rows = []
    for cfg in configs:
        def call(x, weight, out, cfg=cfg):
            kernel.fn[(triton.cdiv(N, cfg.kwargs["BLOCK_N"]),)](x, weight, out, N, K, **cfg.all_kwargs())
        try:
            rows.append({"config": label(cfg), "us": _best_of(call, sets, tries=2)})
        except Exception as e:              # a config the compiler refuses (resources): recorded, not fatal
            rows.append({"config": label(cfg), "us": None, "error": f"{type(e).__name__}: {e}"[:200]})
    for key in [k for k in kernel.cache if k[:2] == (N, K)]:
        del kernel.cache[key]                   # tune this shape afresh
    first = sets[0]
    _sync()
    t0 = time.perf_counter()
    at.autotuned_gemv(**first)
    _sync()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    at.autotuned_gemv(**first)
    _sync()
    cached_s = time.perf_counter() - t0
    timings = {label(c): (t[0] if isinstance(t, (list, tuple)) else t) for c, t in kernel.configs_timings.items()}
    for row in rows:
        row["autotuner_ms"] = timings.get(row["config"])
    hand = linear.gemv_config(N, K)
    hand_label = next((label(c) for c in configs if same_config(c, hand)), None)
    return {"N": N, "K": K, "bytes": (N * K + K + N) * dtype.itemsize, "rows": rows,
            "tuned": label(kernel.best_config), "hand_picked": hand_label,
            **side_by_side({"tuned_us": at.autotuned_gemv, "hand_picked_us": linear.gemv}, sets),
            "first_call_s": first_s, "cached_call_s": cached_s, "configs_timed": len(timings)}


def tuning_cost(at, N, K, dtype=torch.bfloat16, counts=CONFIG_COUNTS) -> dict:
    """Wall time of the first call at one shape against the number of configs (the first n that survive
    pruning; already compiled, so this is benchmarking alone), with the course's do_bench
    (5 + 25 ms<!-- not-measured: a setting --> per config) and Triton's default
    (25 + 100 ms<!-- not-measured: a setting -->); and of a cached call."""
    import triton
    kernel = at.gemv_autotuned_kernel
    sms, _ = at.device_limits(torch.device(_device()))
    configs = at.select_gemv_configs(kernel.configs, N, K, sms)
    inputs = _input_sets(N, K, dtype, min_bytes=0)[0]
    grid = (lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),))
    points = []
    for bench_name, do_bench in (("course do_bench (5 + 25 ms)", kernel._do_bench),
                                 ("Triton default (25 + 100 ms)", None)):
        for n in sorted({min(c, len(configs)) for c in counts}):
            tuner = triton.autotune(configs=configs[:n], key=["N", "K"], do_bench=do_bench)(kernel.fn)
            calls = []
            for _ in range(2):                                                  # tuning call, cached call
                _sync()
                t0 = time.perf_counter()
                tuner[grid](inputs["x"], inputs["weight"], inputs["out"], N, K)
                _sync()
                calls.append(time.perf_counter() - t0)
            points.append({"do_bench": bench_name, "configs": n, "first_s": calls[0], "cached_s": calls[1]})
    return {"N": N, "K": K, "points": points}


DISK_CACHE_RUN = r'''
import inspect, json, sys, time
import torch, tritonllm_course
tritonllm_course.setup(quiet=True)
import triton
from tritonllm_course import kernels
from tritonllm_course.measure.autotune_bench import tuning_log
at = kernels.load("autotune", "solutions").module
N, K, cache_results = {N}, {K}, {cache_results}
if "cache_results" not in inspect.signature(triton.autotune).parameters:
    print(json.dumps({{"supported": False}})); sys.exit()
configs = at.select_gemv_configs(at.gemv_autotuned_kernel.configs, N, K, at.device_limits(torch.device("cuda"))[0])
tuner = triton.autotune(configs=configs, key=["N", "K"], do_bench=at._quick_bench,
                        cache_results=cache_results)(at.gemv_autotuned_kernel.fn)
x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
y = torch.empty(N, device="cuda", dtype=torch.bfloat16)
with tuning_log(tuner) as log:
    t0 = time.perf_counter()
    tuner[lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)](x, w, y, N, K)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
print(json.dumps({{"supported": True, "first_call_s": seconds, "configs_timed": log.benchmarks,
                  "chosen": str(tuner.best_config)}}))
'''


def _run_python(code: str, env: dict | None = None, timeout: int = 300) -> tuple[int, str]:
    """Run `code` in a fresh Python process (the course on its path); (exit status, stdout + stderr)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, **(env or {}), "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def disk_cache(N=5120, K=1024) -> list[dict]:
    """The first call of the autotuned GEMV in three fresh processes sharing one TRITON_CACHE_DIR."""
    runs = []
    with tempfile.TemporaryDirectory() as cache_dir:
        for name, cache_results in (("cold: nothing cached", True),
                                    ("compiled kernels cached, timings not (cache_results=False)", False),
                                    ("compiled kernels and timings cached (cache_results=True)", True)):
            rc, out = _run_python(DISK_CACHE_RUN.format(N=N, K=K, cache_results=cache_results),
                                  {"TRITON_CACHE_DIR": cache_dir})
            last = out.strip().splitlines()[-1] if out.strip() else ""
            result = json.loads(last) if rc == 0 and last.startswith("{") else {"error": last}
            runs.append({"run": name, **result})
    return runs


CAPTURE_RUN = r'''
import torch, tritonllm_course
tritonllm_course.setup(quiet=True)
from tritonllm_course import kernels
at = kernels.load("autotune").module
shapes = [(5120, 1024), (1024, 3584)]
pairs = [(torch.randn(1, K, device="cuda", dtype=torch.bfloat16),
          0.02 * torch.randn(N, K, device="cuda", dtype=torch.bfloat16)) for N, K in shapes]
outs = [torch.empty(1, N, device="cuda", dtype=torch.bfloat16) for N, _ in shapes]
def step():
    for (x, w), y in zip(pairs, outs):
        at.autotuned_gemv(x, w, out=y)
if {warm}:                    # the fix: every shape once, outside the capture (tunes each key)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    step()
outs[0].zero_(); outs[1].zero_()
g.replay(); torch.cuda.synchronize()
err = max(((y.float() - x.float() @ w.float().T).norm() / (x.float() @ w.float().T).norm()).item()
          for (x, w), y in zip(pairs, outs))
print(f"captured and replayed both GEMVs; relative error {{err:.1e}}")
'''


def capture_script(warm: bool) -> str:
    """Python source that captures the autotuned GEMV at two shapes in one CUDA graph and replays it,
    with every shape warmed up (tuned) first or not."""
    return CAPTURE_RUN.format(warm=bool(warm))


def run_apart(code: str, env: dict | None = None) -> str:
    """Run `code` in a fresh process; its exit status and last line (the error, when it failed)."""
    rc, out = _run_python(code, env)
    lines = out.strip().splitlines()
    return f"exit status {rc}: " + (lines[-1] if lines else "(no output)")


# --- plots -------------------------------------------------------------------------------------------
def plot_config_table(result: dict, ax=None):
    """Microseconds per config at one shape; the autotuner's choice and chapter 05_projections's config coloured."""
    import matplotlib.pyplot as plt
    rows = result["rows"]
    ax = ax or plt.subplots(figsize=(6, 0.22 * len(rows) + 1.2))[1]
    colors = ["tab:red" if r["config"] == result["tuned"] else
              "tab:orange" if r["config"] == result["hand_picked"] else "tab:gray" for r in rows]
    ax.barh([r["config"] for r in rows], [r["us"] or 0 for r in rows], color=colors)
    for i, r in enumerate(rows):
        ax.text(r["us"] or 0, i, f" {r['us']:.2f}" if r["us"] else " failed", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("microseconds (CUDA-graph replay)")
    ax.set_title(f"{result['N']} x {result['K']}: red = autotuned, orange = chapter 05_projections", fontsize=9)
    return ax


def plot_tuning_cost(result: dict, ax=None):
    """First-call seconds against the number of configs, for each do_bench; the cached call beside them."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    for name in dict.fromkeys(p["do_bench"] for p in result["points"]):
        pts = [p for p in result["points"] if p["do_bench"] == name]
        ax.plot([p["configs"] for p in pts], [p["first_s"] for p in pts], marker="o", label=f"first call, {name}")
    cached = min(p["cached_s"] for p in result["points"])
    ax.axhline(cached, color="k", ls=":", label=f"a cached call: {cached * 1e6:.0f} us")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("configs timed")
    ax.set_ylabel("seconds (wall)")
    ax.set_title(f"cost of tuning one key, {result['N']} x {result['K']}")
    ax.legend(fontsize=7)
    return ax


def plot_retuning(results: list[dict], what: str = "seconds", ax=None):
    """Cumulative `what` ("seconds" in the GEMM, or "configs" timed) over a sequence of prompts, one line
    per tuning key."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    for r in results:
        total, ys = 0.0, []
        for p in r["prompts"]:
            total += p[what]
            ys.append(total)
        ax.plot(range(1, len(ys) + 1), ys, marker="o",
                label=f"key {r['key']}: {r['tunings']} tunings, {r['configs']} configs timed")
    ax.set_xlabel("prompts served (lengths " + ", ".join(str(p["M"]) for p in results[0]["prompts"]) + ")",
                  fontsize=8)
    ax.set_ylabel("seconds in the GEMM (cumulative)" if what == "seconds" else "configs timed (cumulative)")
    ax.legend(fontsize=7)
    return ax


def main(argv=None) -> int:
    started = gpu_script(__doc__, argv)
    if started is None:
        return 1
    args, rt = started
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import triton
    from .. import kernels
    at = kernels.load("autotune", "solutions").module
    linear = kernels.load("linear", "solutions").module
    tables = [config_table(at, linear, N, K) for N, K in SHAPES]
    cost = tuning_cost(at, 5120, 1024)
    N, K = GEMM_SHAPE
    retuning(at, (100,), ["M", "N", "K"], N, K)     # compile first (M % 16 != 0 like every length): time tuning
    buckets = [retuning(at, PROMPT_LENGTHS, key, N, K) for key in (["M", "N", "K"], ["M_BUCKET", "N", "K"])]
    disk = disk_cache()
    stem, date = results_stem(args.out, "autotune")
    out, tag = stem.parent, stem.name
    atomic_write_text(out / f"{tag}.json", json.dumps(
        {"gpu": rt.gpu_name, "date": date, "summary": rt.summary(),
         "cache_results_supported": "cache_results" in inspect.signature(triton.autotune).parameters,
         "config_tables": tables, "tuning_cost": cost, "retuning": buckets, "disk_cache": disk}, indent=1))
    fig, axes = plt.subplots(2, 3, figsize=(18, 9))
    for ax, table in zip(axes.flat, tables):
        plot_config_table(table, ax)
    fig.tight_layout()
    save_figure(fig, out / f"{tag}_configs.png", dpi=120)
    save_figure(plot_tuning_cost(cost).figure, out / f"{tag}_cost.png", dpi=120, bbox_inches="tight")
    save_figure(plot_retuning(buckets).figure, out / f"{tag}_retuning.png", dpi=120, bbox_inches="tight")
    for t in tables:
        print(f"{t['N']} x {t['K']}: tuned {t['tuned']} {t['tuned_us']:.2f} us, hand-picked {t['hand_picked']} "
              f"{t['hand_picked_us']:.2f} us; first call {t['first_call_s']:.2f} s ({t['configs_timed']} configs), "
              f"cached {t['cached_call_s'] * 1e6:.0f} us")
    for b in buckets:
        print(f"key {b['key']}: {b['tunings']} tunings, {b['configs']} configs timed, {b['seconds']:.2f} s")
    for d in disk:
        print("disk cache:", json.dumps(d))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
