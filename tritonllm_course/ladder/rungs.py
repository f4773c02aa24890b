"""The ladder's steps and what runs each one (chapter 29_naive_to_fast).

Every step is the one before it with one change (`RUNGS`, in order). The first eight run the reference
model (`tritonllm_course.model`) with the course's kernels swapped in (`swap.swapped`): that path can do
what the engine never does (no KV cache, one launch per token row, a sync after every kernel). Each is a
`ModelPath`, run by a `ModelRunner`. The last four are the engine (`tritonllm_course.engine`) at one of its
levels and options: an `EnginePath`, run by an `EngineRunner`. A runner generates greedy tokens and records
when each one reaches the host: the first after the prompt (the prefill), then one per decode step.

`climb` times every step, and checks that each one generates the reference model's greedy tokens. The
measurement on a GPU is `python -m tritonllm_course.ladder` (results/ladder_<gpu>_<date>.md).
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import torch

from .. import kernels, slots
from .. import reference as R
from .. import validate
from ..config import Qwen35Config
from ..demo import KERNEL_OF_OP, every_kernel
from ..model import Qwen35Model
from ..swap import swapped
from .naive import Transposed, token_by_token

PROJECTIONS = ("transposed", "row-major", "gemv", "gemm")


@dataclass(frozen=True)
class ModelPath:
    """A step on the reference model: which projection runs, and what the model keeps between tokens.

    projection: "transposed"  one program per output on a transposed copy of each matrix, per token row
                "row-major"   the same kernel on the matrices as they are, per token row
                "gemv"        chapter 05_projections's GEMV, per token row
                "gemm"        chapter 05_projections's `linear`: the GEMV for one token, the GEMM for several
    kv_cache:   keep the KV cache and the DeltaNet conv and recurrent states; else each token runs the
                whole sequence again
    flash:      FlashAttention for a prompt, FlashDecoding for a token (else chapter 08_attention's kernels)
    fused_norm: the residual add before each MLP and its RMSNorm in one kernel (chapter 21_norm_fusion)
    sync:       torch.cuda.synchronize() after every kernel, and the wrappers' host-side range checks
    """
    projection: str = "transposed"
    kv_cache: bool = False
    flash: bool = False
    fused_norm: bool = False
    sync: bool = True

    def __post_init__(self):
        if self.projection not in PROJECTIONS:
            raise ValueError(f"projection must be one of {PROJECTIONS}, got {self.projection!r}")


@dataclass(frozen=True)
class EnginePath:
    """A step on the engine: its level, the CUDA graph, programmatic dependent launch (None: the engine's
    default, where the GPU has it)."""
    level: str
    cuda_graph: bool
    pdl: bool | None = False


@dataclass(frozen=True)
class Rung:
    """One rung of the ladder (a step of chapter 29_naive_to_fast: the rung before it with one change). Named apart from
    the engine's `plan.Step`, a row of a level's table: one kernel slot of a decode token or a prompt chunk."""
    key: str
    label: str                        # short, for the plot
    change: str                       # what this step changes from the one before
    article: str                      # where the source article takes the same step ("-": it does not)
    chapter: str                      # where the course teaches it: the chapters' slugs
    path: ModelPath | EnginePath
    # its one change is the CUDA graph or PDL: on the CPU the engine ignores the one and the interpreter makes
    # the other a no-op, so there it runs the code of the step before
    gpu_only: bool = False


_NAIVE = ModelPath()
_COALESCED = replace(_NAIVE, projection="row-major")
_GEMV = replace(_COALESCED, projection="gemv")
_GEMM = replace(_GEMV, projection="gemm")
_CACHE = replace(_GEMM, kv_cache=True)
_FLASH = replace(_CACHE, flash=True)
_FUSED = replace(_FLASH, fused_norm=True)
_NO_SYNC = replace(_FUSED, sync=False)

# The engine comes in at its fused level: the one level that keeps what the steps before it have (FlashAttention
# and FlashDecoding, a residual add fused with a norm). It brings what else that level does with it (merged
# weights, the decode norms folded into the projections, split-K): the step's `change` names them.
RUNGS = (
    Rung("naive", "naive", "one program per output, the weight read transposed (uncoalesced), one launch per "
         "token row; no KV cache and no DeltaNet state: every token runs the whole sequence again; a sync "
         "after every kernel", "4.1", "29_naive_to_fast", _NAIVE),
    Rung("coalesced", "coalesced", "the same kernel reading the weight row-major: a warp's 32 loads coalesce",
         "4.1-4.2", "05_projections", _COALESCED),
    Rung("gemv", "cooperative GEMV", "chapter 05_projections's GEMV: 2 rows a program, 16-byte loads per lane; "
         "still one launch per token row", "4.2", "05_projections", _GEMV),
    Rung("gemm", "prompt as GEMM", "a sequence's tokens through chapter 05_projections's GEMM, one launch per "
         "projection", "4.2", "05_projections", _GEMM),
    Rung("kv_cache", "KV cache + state", "the KV cache and the DeltaNet conv and recurrent states kept: a "
         "decode step runs one token", "4.3", "07_kv_cache, 15_delta_rule", _CACHE),
    Rung("flash", "FlashAttention / FlashDecoding", "FlashAttention for the prompt, FlashDecoding for a token",
         "4.4", "23_flash_attention, 25_flash_decoding", _FLASH),
    Rung("fused_norm", "fused residual + norm", "the residual add before each MLP fused with its RMSNorm",
         "4.5", "21_norm_fusion", _FUSED),
    Rung("no_sync", "no syncs", "no sync after each kernel, no host-side range checks (each reads the device)",
         "4.5", "18_cuda_graphs", _NO_SYNC),
    Rung("engine", "static buffers (engine)", "the engine at its fused level, op by op: weights merged, every "
         "buffer allocated once, the norms folded into the decode projections, split-K", "3.1",
         "19_engine, 21_norm_fusion, 24_split_k", EnginePath("fused", cuda_graph=False)),
    Rung("graph", "CUDA graph", "the decode step, and a prompt met before, replayed from a CUDA graph", "-",
         "18_cuda_graphs", EnginePath("fused", cuda_graph=True), gpu_only=True),
    Rung("fast", "fewest kernels", "the fast level: the residual adds, gates and norms inside the kernels "
         "around them", "-", "22_layer_fusion", EnginePath("fast", cuda_graph=True)),
    Rung("pdl", "PDL", "programmatic dependent launch: the engine's default where the GPU has it (sm_90+)", "-",
         "18_cuda_graphs", EnginePath("fast", cuda_graph=True, pdl=None), gpu_only=True),
)


def rungs_for(device) -> tuple[Rung, ...]:
    """The steps that run code of their own on this device: all of them on a GPU, on the CPU all but the
    `gpu_only` ones."""
    return RUNGS if torch.device(device).type == "cuda" else tuple(s for s in RUNGS if not s.gpu_only)


def kernel_families() -> list[str]:
    """The kernel families (solutions/<family>.py, exercises/<family>.py) the ladder's steps run."""
    from ..engine.plan import slot_names
    model = {family for family, _ in KERNEL_OF_OP.values()} | {"flash_attention", "flash_decoding", "norm_fusion",
                                                               "naive_gemv"}
    levels = {p.level for s in RUNGS if isinstance(p := s.path, EnginePath)}
    engine = {slots.get(name).family for level in levels for name in slot_names(level)}
    return sorted(model | engine)


def rung_named(key: str) -> Rung:
    for step in RUNGS:
        if step.key == key:
            return step
    raise KeyError(f"no step {key!r}; the steps are {[s.key for s in RUNGS]}")


# --- running a step ---------------------------------------------------------------------------------------------
@dataclass
class Timed:
    """One run: the greedy tokens, the seconds to the first one, the mean seconds of a decode step over
    `decode_steps` of them, and the kernel calls (host wrappers) per decode step."""
    tokens: list[int]
    prefill_s: float
    decode_s: float
    decode_steps: int
    calls_per_token: float | None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def attention_by_path(prefill: Callable, decode: Callable) -> Callable:
    """The reference model's `attention(q, k, v, pos, scale)`: a prompt through `prefill`; one new token
    (q [1, heads, D], k and v the whole cache up to it) through the decode kernel over all the rows given."""
    def attention(q, k, v, pos, scale):
        if q.shape[0] != 1:
            return prefill(q, k, v, pos, scale)
        length = torch.full((1,), k.shape[0], dtype=torch.int32, device=k.device)   # filled on the device
        return decode(q[0], k, v, length, scale).unsqueeze(0)                         # [H, D] -> [1, H, D]
    return attention


class ModelRunner:
    """The reference model with the kernels of a `ModelPath` swapped in. `calls` counts the kernel calls."""

    def __init__(self, path: ModelPath, config: Qwen35Config, weights: dict[str, torch.Tensor],
                 source: str | None = None):
        self.path, self.source = path, source
        self.model = Qwen35Model(config, weights)
        self.device = self.model.device
        self.calls = 0
        self.transposed = None            # the naive step's transposed copies of the matrices
        self.ops = self._ops()

    def _kernel(self, family: str, name: str) -> Callable:
        return self._counted(kernels.get(family, name, self.source))

    def _counted(self, fn: Callable) -> Callable:
        """fn, counted, and followed by a sync where the path syncs after every kernel."""
        sync = self.path.sync and self.device.type == "cuda"

        def call(*args, **kwargs):
            self.calls += 1
            result = fn(*args, **kwargs)
            if sync:
                torch.cuda.synchronize(self.device)
            return result
        return call

    def _ops(self) -> dict[str, Callable]:
        p = self.path
        ops = {name: self._counted(fn) for name, fn in every_kernel(self.source).items()}
        if p.projection in ("transposed", "row-major"):
            gemv = self._kernel("naive_gemv", "per_output_linear")
            if p.projection == "transposed":
                gemv = self.transposed = Transposed(self.model.weights, gemv)
            ops["linear"] = token_by_token(gemv)
        elif p.projection == "gemv":
            ops["linear"] = token_by_token(self._kernel("linear", "gemv"))
        else:
            ops["linear"] = self._kernel("linear", "linear")
        if p.flash:
            ops["attention"] = attention_by_path(self._kernel("flash_attention", "flash_attention"),
                                                 self._kernel("flash_decoding", "flash_decoding"))
        else:
            ops["attention"] = attention_by_path(self._kernel("attention", "attention"),
                                                 self._kernel("attention", "decode_attention"))
        if p.fused_norm:
            ops["residual_rms_norm"] = self._kernel("norm_fusion", "residual_rms_norm")
        return ops

    def generate(self, prompt: list[int], n: int, ops: dict | None = None) -> Timed:
        """n greedy tokens after `prompt`, each handed to the host as it comes."""
        model, kv = self.model, self.path.kv_cache
        checks = contextlib.nullcontext() if self.path.sync else validate.no_device_checks()
        with swapped(**(ops or self.ops)), checks:
            _sync(self.device)
            start = time.perf_counter()
            if kv:
                cache = model.new_cache(len(prompt) + n)
                logits = model(prompt, cache)
            else:
                ids = list(prompt)
                logits = model(ids)                       # no cache: a throw-away one for this pass alone
            tokens, stamps, first_calls = [], [], 0
            for i in range(n):
                tokens.append(int(R.argmax(logits[-1])))  # the host read of each token
                stamps.append(time.perf_counter())
                if i == 0:
                    first_calls = self.calls
                if i + 1 < n:
                    if kv:
                        logits = model(tokens[-1:], cache)
                    else:
                        ids.append(tokens[-1])
                        logits = model(ids)               # the whole sequence again
        return Timed(tokens, stamps[0] - start, (stamps[-1] - stamps[0]) / (n - 1), n - 1,
                     (self.calls - first_calls) / (n - 1))

    def warm_up(self, prompt: list[int], n: int) -> None:
        """Compile every kernel the timed run will launch, at the shapes it will launch them. Without a KV cache
        the run is long: its projections are compiled on one row of each matrix, and the other kernels by a
        run at the same lengths with chapter 05_projections's projection in place of the step's."""
        if self.path.kv_cache or self.path.projection == "gemm":
            self.generate(prompt, n)
            return
        for w in {id(w): w for w in self.model.weights.values() if w.dim() == 2}.values():
            self.ops["linear"](torch.zeros(1, w.shape[1], dtype=w.dtype, device=w.device), w)
        self.generate(prompt, n, ops=dict(self.ops, linear=self._kernel("linear", "linear")))

    def close(self) -> None:
        self.model = self.ops = self.transposed = None


class EngineRunner:
    """The engine at an `EnginePath`'s level and options."""

    def __init__(self, path: EnginePath, config: Qwen35Config, weights: dict[str, torch.Tensor],
                 source: str | None = None, max_seq_len: int = 512):
        from ..engine import Engine
        self.path = path
        self.engine = Engine(config, weights, max_seq_len=max_seq_len, level=path.level, cuda_graph=path.cuda_graph,
                             pdl=path.pdl, default_source=source)
        self.device = self.engine.device
        self._calls = None

    def generate(self, prompt: list[int], n: int) -> Timed:
        """The prompt alone first (to its first token on the host), then the stream of n tokens. The stream
        runs one step ahead: before the host reads token i it queues the step that makes token i + 1, so the
        time to its first token would hold a decode step's launches too, and its last token has no step
        queued behind it; the decode mean is over the n - 2 steps between."""
        e = self.engine
        e.reset()
        _sync(self.device)
        start = time.perf_counter()
        e.prefill(prompt)
        int(e.counters.ids[0])                       # the host read of the first token
        prefill_s = time.perf_counter() - start
        tokens, stamps = [], []
        for token in e.stream(prompt, n, eos_token_id=None):
            stamps.append(time.perf_counter())
            tokens.append(token)
        return Timed(tokens, prefill_s, (stamps[-2] - stamps[0]) / (n - 2), n - 2, self.calls_per_token())

    def calls_per_token(self) -> int:
        """The slot calls of one more decode step after a run, traced op by op (a graph replays the same
        kernels); the cache has room for it (`runner` sizes it with a margin)."""
        if self._calls is None:
            e = self.engine
            graph, e.use_graph = e.use_graph, False
            try:
                with e.tracing() as calls:
                    e.decode()
            finally:
                e.use_graph = graph
            self._calls = len(calls)
        return self._calls

    def warm_up(self, prompt: list[int], n: int) -> None:
        """Compile, autotune and capture: a prompt's graph is captured at its second use, so twice."""
        for _ in range(2 if self.path.cuda_graph else 1):
            self.generate(prompt, n)

    def close(self) -> None:
        self.engine = None


def runner(step: Rung, config: Qwen35Config, weights: dict[str, torch.Tensor], source: str | None = None,
           max_seq_len: int = 512):
    """The runner of one step on these weights."""
    if isinstance(step.path, EnginePath):
        return EngineRunner(step.path, config, weights, source, max_seq_len)
    return ModelRunner(step.path, config, weights, source)


# --- the ladder -------------------------------------------------------------------------------------------------
@dataclass
class Check:
    """A run of every step on other weights (fp32 at the real shapes on a GPU: there bf16 rounding alone can
    flip a greedy token), its tokens against the reference model's."""
    weights: dict[str, torch.Tensor]
    prompt: list[int]
    tokens: int = 4


@dataclass
class Row:
    key: str
    label: str
    change: str
    article: str
    chapter: str
    prefill_ms: float | None = None
    decode_ms: float | None = None
    prefill_runs: int = 0
    decode_tokens: int = 0            # decode steps timed, all runs together
    calls_per_token: float | None = None
    setup_s: float | None = None      # build, compile, capture (the warm-up)
    tokens: list[int] = field(default_factory=list)
    reference: list[int] = field(default_factory=list)
    identical: bool | None = None
    error: str = ""                   # the step did not run (or was skipped): no times
    check_error: str = ""             # the timed step ran; its token check did not


def prompt_ids(config: Qwen35Config, n: int, seed: int = 0) -> list[int]:
    """n random token ids, the same for every step."""
    return torch.randint(0, config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference_tokens(config: Qwen35Config, weights: dict[str, torch.Tensor], prompt: list[int], n: int) -> list[int]:
    """The plain reference model's greedy tokens (PyTorch, no kernel swapped in)."""
    from ..generation import generate
    return generate(Qwen35Model(config, weights), prompt, n, eos_token_id=None)


def check_climb_args(prompt_len: int, tokens: int, uncached_tokens: int, repeats: int) -> None:
    if prompt_len < 1:
        raise ValueError(f"prompt_len must be >= 1, got {prompt_len}")
    if tokens < 3 or uncached_tokens < 2:
        raise ValueError(f"tokens must be >= 3 (the engine's stream runs a step ahead: a decode step to time needs "
                         f"one after it) and uncached_tokens >= 2 (a decode step after the prefill); got {tokens} "
                         f"and {uncached_tokens}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")


def climb(config: Qwen35Config, weights: dict[str, torch.Tensor], *, steps=RUNGS, prompt_len: int = 128,
          tokens: int = 32, uncached_tokens: int = 2, repeats: int = 3, source: str | None = None,
          check: Check | str | None = "timed", warm_up: bool | None = None, fastest_first: bool = False,
          budget_s: float | None = None, seed: int = 0, on_row: Callable | None = None,
          log=sys.stderr) -> list[Row]:
    """Time every step on `weights` and check its tokens; returns one Row per step, in ladder order.

    prompt_len:      the prompt of the prefill; decode steps follow it
    tokens:          generated per run by a step with a KV cache (the first by the prefill), `repeats` runs,
                     the medians kept
    uncached_tokens: generated by a step without one, in one run: each of its decode steps runs the whole
                     sequence again
    check:           "timed": the timed run's tokens against the reference model's on the same weights (on
                     the CPU, in fp32); a `Check`: a run of its own; None: no check
    warm_up:         run each step once before timing it (compiles; default: on a GPU)
    fastest_first:   run the steps from the last to the first (the slowest last, where a budget cuts)
    budget_s:        start no step after this many seconds (its row says it was skipped)
    on_row:          called with the rows (ladder order) after every step: to write results as they come
    """
    check_climb_args(prompt_len, tokens, uncached_tokens, repeats)
    device = next(iter(weights.values())).device
    warm_up = device.type == "cuda" if warm_up is None else warm_up
    prompt = prompt_ids(config, prompt_len, seed)
    longest = max(tokens, uncached_tokens)
    want = reference_tokens(config, weights, prompt, longest) if check == "timed" else None
    if isinstance(check, Check):
        want_check = reference_tokens(config, check.weights, check.prompt, check.tokens)
    rows = {s.key: Row(s.key, s.label, s.change, s.article, s.chapter) for s in steps}
    started = time.perf_counter()
    for step in (reversed(steps) if fastest_first else steps):
        row = rows[step.key]
        if budget_s is not None and time.perf_counter() - started > budget_s:
            row.error = f"skipped: the run's time budget of {budget_s:.0f} s was spent"
            continue
        print(f"[{time.perf_counter() - started:6.0f} s] {step.key}: {step.change}", file=log, flush=True)
        cached = not isinstance(step.path, ModelPath) or step.path.kv_cache
        n, runs = (tokens, repeats) if cached else (uncached_tokens, 1)
        run = None
        try:
            t0 = time.perf_counter()
            run = runner(step, config, weights, source, max_seq_len=prompt_len + longest + 8)
            if warm_up:
                run.warm_up(prompt, n)
            row.setup_s = time.perf_counter() - t0
            timed = [run.generate(prompt, n) for _ in range(runs)]
            row.prefill_ms = 1e3 * statistics.median(t.prefill_s for t in timed)
            row.decode_ms = 1e3 * statistics.median(t.decode_s for t in timed)
            row.prefill_runs, row.decode_tokens = runs, sum(t.decode_steps for t in timed)
            row.calls_per_token = timed[0].calls_per_token
            row.tokens = timed[0].tokens
            if want is not None:
                row.reference = want[:n]
                row.identical = row.tokens == row.reference
        except Exception as e:  # noqa: BLE001  (one failing step must not lose the others' numbers)
            row.error = _failed(e)
        finally:
            if run is not None:
                run.close()
            run = None
            _free(device)
        if isinstance(check, Check) and not row.error:
            try:
                run = runner(step, config, check.weights, source, max_seq_len=len(check.prompt) + check.tokens + 8)
                row.tokens, row.reference = run.generate(check.prompt, check.tokens).tokens, want_check
                row.identical = row.tokens == row.reference
            except Exception as e:  # noqa: BLE001  (its timing stands; the row says the check failed)
                row.check_error, row.identical = _failed(e), False
            finally:
                if run is not None:
                    run.close()
                run = None
                _free(device)
        done = ("" if row.error else f"prefill {row.prefill_ms:.1f} ms, decode {row.decode_ms:.2f} ms/token, "
                f"tokens {'identical' if row.identical else 'DIFFERENT' if row.identical is False else 'unchecked'}")
        print(f"         {row.error or done}{f' (check: {row.check_error})' if row.check_error else ''}", file=log,
              flush=True)
        if on_row is not None:
            on_row([rows[s.key] for s in steps])
    return [rows[s.key] for s in steps]


def _failed(e: Exception) -> str:
    first = str(e).splitlines()[0][:200] if str(e) else ""
    return f"failed: {type(e).__name__}: {first}"


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def rows_as_dicts(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]
