"""What the lab's probes share: where a result goes and how it is written, the timing helpers, the
relative error of a check, a variant swapped in for a block (`replaced`), a kernel rebuilt with a few lines
of its source changed (`edited_kernel`), and the grid barrier of the one-kernel experiments.

A probe runs from the repository root as a module, so that it finds this one as `lab.common`:

    python -m lab.<probe> [OUTDIR]     (OUTDIR: default lab/results/)

Every result file is named as the course's benchmarks name theirs (`<name>_<gpu>_<date>.json`) and starts
with the GPU and the date (`header`). Timings are CUDA-graph replays over inputs larger than L2, as
`tritonllm_course.measure.benchmark` times the course's kernels: `best_time_calls` over copies of a
call's inputs (`copies_past_l2` of them), `per_launch_us` for LAUNCHES launches captured back to back,
`timed_layers` for a chain of layers updating one stream in place.
"""
import gc
import inspect
import json
import linecache
import os
import statistics
import textwrap
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import triton
import triton.language as tl

LAB = Path(__file__).resolve().parent
RESULTS = LAB / "results"         # where a probe writes when no OUTDIR is given
LAUNCHES = 64                     # launches back to back in one graph: `per_launch_us`'s unit
L2_PASS = 256 << 20               # bytes of distinct inputs per timed graph: the H200's L2 is 50 MB


# --- where a result goes ----------------------------------------------------------------------------------
def out_dir(argv: list[str] | None = None) -> str:
    """The output folder: the command line's first argument, or lab/results/."""
    argv = sys.argv[1:] if argv is None else argv
    return argv[0] if argv else str(RESULTS)


def setup():
    """The course's runtime, quietly (the probes need a GPU; their `check`s run anywhere)."""
    import tritonllm_course
    return tritonllm_course.setup(quiet=True)


def result_path(out: str | Path, name: str) -> Path:
    """OUTDIR/<name>_<gpu>_<date>.json (the folder made if missing)."""
    from tritonllm_course.measure.benchmark import results_stem
    return results_stem(out, name)[0].with_suffix(".json")


def header(**fields) -> dict:
    """The start of every result: the GPU, the date, then `fields`."""
    return {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), **fields}


def save(path: Path, res: dict) -> None:
    """Write `res` (again: a probe saves after every case, so a run cut short keeps what it measured)."""
    path.write_text(json.dumps(res, indent=1))


def keep_row(res: dict, path: Path, row: dict) -> None:
    """One measured case: appended to res["rows"], printed, and the file saved again."""
    res["rows"].append(row)
    print(row, flush=True)
    save(path, res)


@contextmanager
def replaced(owner, name: str, value):
    """`owner.name` is `value` inside the block and what it was after (a probe's variant swapped into the
    code that reads it at call time, e.g. `triton_helpers.pdl_gemv_config`)."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield original
    finally:
        setattr(owner, name, original)


def edited_kernel(kernel, edits, **names):
    """A copy of the `@triton.jit` kernel with each (old, new) of `edits` replaced in its source (each old text
    exactly once), compiled in a copy of its module's namespace (plus `names`): a variant that differs from the
    course's kernel in those lines alone, rather than a second copy of it to keep in step. The source is put
    in `linecache` under a name of its own, where Triton (and the interpreter) read a kernel's source."""
    src = textwrap.dedent(inspect.getsource(kernel.fn))
    for old, new in edits:
        if src.count(old) != 1:
            raise ValueError(f"{kernel.fn.__name__}: {old!r} is in its source {src.count(old)} times, not once")
        src = src.replace(old, new)
    filename = f"<lab edit of {kernel.fn.__name__} {abs(hash(src)):x}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)   # mtime None: kept
    namespace = {**kernel.fn.__globals__, **names}
    exec(compile(src, filename, "exec"), namespace)
    return namespace[kernel.fn.__name__]


def error_text(e: Exception, limit: int = 300) -> str:
    """A config that fails is recorded, not fatal: its exception, shortened."""
    return f"{type(e).__name__}: {e}"[:limit]


# --- checks ------------------------------------------------------------------------------------------------
def events_us(fn, n: int) -> float:
    """us per fn() over n calls queued back to back, timed by CUDA events."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) * 1e3 / n


def fast_decode_us(context: int, tokens: int = 64, setup=None, config=None, **engine_kwargs) -> dict:
    """The engine's fast decode step of Qwen3.5-0.8B, or of `config` (random weights of the real shapes, bf16,
    its CUDA graph) after a `context`-token prompt: us per token by CUDA events over `tokens` replays (8
    untimed first), and the greedy tokens of a 16-token generation. `engine_kwargs` go to `Engine.random`
    (e.g. pdl=False, level="fused"); `setup(engine)`, if given, changes the engine before its first step (a
    probe's kernels swapped in)."""
    from tritonllm_course.config import QWEN35_0_8B
    from tritonllm_course.engine import Engine
    config = config or QWEN35_0_8B
    engine_kwargs = {"level": "fast", **engine_kwargs}
    engine = Engine.random(config, dtype=torch.bfloat16, device="cuda", seed=0,
                           max_seq_len=context + 3 * tokens + 40, **engine_kwargs)
    if setup is not None:
        setup(engine)
    prompt = [(7 * i + 3) % config.vocab_size for i in range(context)]
    ids = engine.generate(prompt, 16)
    engine.reset()
    engine.prefill(prompt)
    for _ in range(8):
        engine.decode()
    torch.cuda.synchronize()
    us = events_us(engine.decode, tokens)
    del engine
    gc.collect()               # the engine's graphs and closures hold cycles: free its weights before the next
    torch.cuda.empty_cache()
    return {"us_per_token": us, "tokens": ids}


def engine_variants(res: dict, path: Path, variants: dict, engine_us, contexts, repeats: int, base: str) -> dict:
    """`engine_us(variant, context)` (a `fast_decode_us` result) for every variant at every context, the
    variants alternated `repeats` times, into res["engine"]["<name> @ <context> #<repeat>"], saved after
    each. Returns {key: whether its greedy tokens equal those of variant `base`'s first run at its context}."""
    for context in contexts:
        for rep in range(repeats):
            for name, variant in variants.items():
                key = f"{name} @ {context} #{rep}"
                try:
                    res["engine"][key] = engine_us(variant, context)
                except Exception as e:
                    res["engine"][key] = {"error": error_text(e)}
                r = res["engine"][key]
                print(key, r.get("us_per_token", r), flush=True)
                save(path, res)
    first = {c: res["engine"].get(f"{base} @ {c} #0", {}).get("tokens") for c in contexts}
    return {k: v.get("tokens") == first[int(k.split("@")[1].split("#")[0])]
            for k, v in res["engine"].items() if "tokens" in v}


def engine_probe(out, name: str, variants: dict, engine_us, contexts, repeats: int, check, base: str = "as is") -> dict:
    """A probe of engine variants from start to end: `check()` into the header, then `engine_variants` over the
    variants PROBE_VARIANTS names (joined by ";"; all when it is unset), saved to OUTDIR/<name>_<gpu>_<date>.json
    after each, with whether each run's tokens equal `base`'s."""
    setup()
    res = header(check=check(), engine={})
    path = result_path(out, name)
    names = [n for n in os.environ.get("PROBE_VARIANTS", "").split(";") if n]
    variants = {n: v for n, v in variants.items() if not names or n in names}
    res["tokens_equal_as_is"] = engine_variants(res, path, variants, engine_us, contexts, repeats, base)
    print("tokens equal:", res["tokens_equal_as_is"], flush=True)
    save(path, res)
    return res


def ttft_ms(engine, prompt: list[int], runs: int = 5) -> tuple[float, int]:
    """(ms, the first token) of the engine's time to the first token of `prompt`: the median of `ttft_runs_ms`."""
    times, token = ttft_runs_ms(engine, prompt, runs)
    return statistics.median(times), token


def ttft_runs_ms(engine, prompt: list[int], runs: int = 5) -> tuple[list[float], int]:
    """(each run's ms, the first token) of the engine's time to the first token of `prompt`, as `engine_bench`
    times it: a new sequence (`engine.reset`), the prompt, the first token read by the host; `runs` runs after
    two untimed (a prompt chunk's graph is captured at its second use)."""
    times, token = [], None
    for i in range(runs + 2):
        engine.reset()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        engine.prefill(prompt)
        token = int(engine.counters.ids[0])
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    return times, token


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want| (2-norms, in fp64)."""
    want = want.double()
    return ((got.double() - want).norm() / want.norm()).item()


# --- timing ------------------------------------------------------------------------------------------------
def copies_past_l2(nbytes: int, least: int = 2, most: int = 64) -> int:
    """How many copies of `nbytes` of inputs one timed graph cycles through: L2_PASS bytes in all."""
    return max(least, min(most, L2_PASS // max(1, nbytes)))


def best_time_calls(call, input_sets: list[dict], runs: int = 2) -> float:
    """The best of `runs` `benchmark.time_calls`: us per `call(**inputs)`, replayed over the input sets."""
    from tritonllm_course.measure.benchmark import time_calls
    return min(time_calls(call, input_sets) for _ in range(runs))


def weight_copies(rows: int, K: int) -> list:
    """Copies of one random bf16 [rows, K] weight (the same values, distinct memory), enough of them to
    pass L2 many times over when launches cycle through them (at least L2_PASS bytes in all)."""
    w0 = 0.02 * torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    return [w0] + [w0.clone() for _ in range(max(1, triton.cdiv(L2_PASS, rows * K * 2) - 1))]


def per_launch_us(fn, launches: int = LAUNCHES) -> float:
    """us per launch of fn() (`launches` launches) replayed from a CUDA graph: the best of three medians."""
    from tritonllm_course.engine.graph import capture
    from tritonllm_course.measure.benchmark import _median_event_time
    fn()                                            # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    capture(graph, fn)
    graph.replay()
    return min(_median_event_time(graph.replay, 20) for _ in range(3)) * 1e3 / launches


def timed_layers(fn, x, x0, layers: int):
    """(us per layer, the stream after one fn()) for fn(), which runs `layers` layers on the stream x in
    place: compiled outside the capture, then replayed from a CUDA graph (best of three medians)."""
    from tritonllm_course.engine.graph import capture
    from tritonllm_course.measure.benchmark import _median_event_time
    x.copy_(x0)
    fn()                            # compile outside the capture
    torch.cuda.synchronize()
    x.copy_(x0)
    fn()
    result = x.clone()
    graph = torch.cuda.CUDAGraph()
    capture(graph, fn)
    graph.replay()
    return min(_median_event_time(graph.replay, 30) for _ in range(3)) * 1e3 / layers, result


# --- one kernel for several: a grid-wide barrier -----------------------------------------------------------
def fits_one_wave(compiled, programs: int, warps: int) -> str | None:
    """Why `programs` programs of this compiled kernel cannot all be resident at once (None: they can).
    A grid barrier with a program left waiting for a free SM would wait forever."""
    props = torch.cuda.get_device_properties(0)
    compiled._init_handles()
    regs = getattr(props, "regs_per_multiprocessor", 65536)
    shared = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
    per_sm = min(regs // max(1, compiled.n_regs * 32 * warps), shared // max(1, compiled.metadata.shared))
    if compiled.n_spills:
        return f"{compiled.n_spills} registers spilled"
    if per_sm * props.multi_processor_count < programs:
        return f"{per_sm} program(s) per SM x {props.multi_processor_count} SMs < {programs} programs"
    return None


@triton.jit
def grid_barrier(counter_ptr, P):
    """Wait until all P programs of the grid got here. counter_ptr: an int32 that starts at a multiple of P
    and grows by P per crossing, so it needs no reset between launches or graph replays of one grid size
    (a grid of another size needs its own counter). Launch cooperatively (`launch_cooperative_grid=True`):
    a grid that cannot be resident at once then fails to launch instead of waiting here forever."""
    tl.debug_barrier()                  # every thread of this program has issued its stores
    ticket = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    target = (ticket // P + 1) * P
    seen = ticket + 1
    while seen < target:
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()                  # the whole program waits for its first thread


@triton.jit
def k_slice_tile(x_ptr, w_ptr, rm, rn, M, N, K, k_lo, k_hi, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, PREC: tl.constexpr = None):
    """fp32 [BLOCK_M, BLOCK_N]: sum over k in [k_lo, min(k_hi, K)) of x[rm, k] W[rn, k], x [M, K] and W [N, K]
    row-major; rows, columns and k past the edges masked; PREC: `tl.dot`'s input_precision (None: its default).
    The split-K GEMMs' piece (`prefill_probe`, "ieee"; `prompt_splitk_probe`)."""
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, tl.minimum(k_hi, K), BLOCK_K):
        k_ok = (k0 + rk) < K
        a = tl.load(x_ptr + rm[:, None].to(tl.int64) * K + (k0 + rk)[None, :], mask=m_ok[:, None] & k_ok[None, :],
                    other=0.0)                                                      # [BLOCK_M, BLOCK_K]
        b = tl.load(w_ptr + rn[None, :].to(tl.int64) * K + (k0 + rk)[:, None], mask=k_ok[:, None] & n_ok[None, :],
                    other=0.0)                                                      # [BLOCK_K, BLOCK_N]
        acc = tl.dot(a, b, acc, input_precision=PREC)
    return acc
