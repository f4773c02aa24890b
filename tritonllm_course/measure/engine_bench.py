"""The article's benchmark table, measured in one run on one GPU: `tritonllm-course bench`.

Systems (the same random weights of Qwen3.5-0.8B's real shapes, bf16, batch 1, greedy):
  transformers eager             Qwen3_5ForCausalLM.generate, dynamic cache
  transformers static + compile  generate with cache_implementation="static": transformers compiles the
                                 decode step (mode reduce-overhead); its prefill runs eagerly
  reference eager                the course's plain PyTorch model (`tritonllm_course.model`)
  reference compiled             the same PyTorch reference ops in the engine's static buffers, decode step
                                 through torch.compile (the plain model recompiles at every token: its
                                 cache length is a Python int that changes, so it is compiled in this form)
  Triton (one kernel per operator)
                                 the engine at level "operators" (chapter 19_engine), decode step launched op by
                                 op ("triton engine" names it too)
  Triton (one kernel per operator) + CUDA Graph
                                 the same, decode step replayed from a CUDA graph (chapter 18_cuda_graphs; also
                                 "triton engine + CUDA graph")
  Triton + fusion + split-K      level "fused": RMSNorm folded into the merged projections, split-K for the
                                 narrow decode GEMVs, FlashDecoding / FlashAttention (chapters 21_norm_fusion,
                                 23_flash_attention, 24_split_k and 25_flash_decoding)
  Triton + fusion + split-K + CUDA Graph
                                 the same, replayed from a CUDA graph
  Triton, fewest kernels         level "fast": "fused" with the residual adds in the output projections'
                                 epilogues, plain GEMVs for them, the attention's q/k norms, RoPE and
                                 cache write in one kernel, at decode the DeltaNet gates inside the
                                 recurrence and its gated RMSNorm inside out_proj (chapter 22_layer_fusion)
  Triton, fewest kernels + CUDA Graph
                                 the same, replayed from a CUDA graph
  Triton, fewest kernels + CUDA Graph + PDL
                                 the same, the kernels of the decode step and of a prompt chunk of up to 128
                                 tokens (`Engine.PDL_PROMPT_TOKENS`) launched with programmatic dependent launch
                                 (chapter 18_cuda_graphs; sm_90+): the rows above launch without it
With a CUDA graph, a prompt length met before also replays its prefill from a graph (captured in the
set-up's warm-up; `Engine(prefill_graph=...)`). The Triton rows run the kernels TRITONLLM_KERNELS selects
(`auto` when unset: yours where filled in, else the solutions); the run prints which, per level.

Method. Every system generates the same way: it hands each new token to the host as it is produced
(streaming, one host read per token), and the time of each token's arrival is recorded. Prefill = time
to the first token for a 128-token prompt; decode at context L = mean time between consecutive tokens
after a prompt of L tokens (STEPS tokens; median over REPEATS runs). Bandwidth: bytes a decode step must
move at context L (`measure.bytes_model.bytes_per_token`; for Qwen3.5-0.8B in bf16 docs/qwen35.md §6's
1,544,820,416 + 12,288 L bytes) per second, and the floor time (those bytes at the measured copy bandwidth)
as a percentage of the measured time. Time to the first token is recorded at every context length too.
`--config` takes the shapes of another size of the family (`config.FAMILY`, docs/family.md), random weights;
its results go to OUT/engine_<config>_<gpu>_<date>/.
`--weights int8` (or int8_group, fp8) runs the Triton rows from 8-bit weights (`Engine(weight_format=...)`,
chapter 31_weight_quant) at the levels that take them (`plan.runs_weights`: all three, the fast one not
int8_group; by default only those rows run): the byte model, and so the floor, counts the 8-bit weights and
their scales; results go to OUT/engine_int8_<gpu>_<date>/.
Kernels per decode token: the slot calls of one traced decode step of each level (an engine of the
real shapes on the meta device, no memory) and the kernels they launch (`OpTable.launches`).
Results: markdown, JSON and a PNG plot in OUT/engine_<gpu>_<date>/, rewritten after every system, so a
run cut short still leaves what it measured.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .. import kernels
from ..config import FAMILY, PRESETS, QWEN35_0_8B
from ..demo import meta_weights
from ..engine import Engine
from ..engine.plan import levels_markdown, runs_weights
from ..hf_compat import hf_from_pretrained, hf_model, weights_from_hf
from ..model import Qwen35Model
from ..reference import precision
from ..runtime import no_launch_overlap, setup
from ..safe_files import atomic_write_text, check_out_folder, results_folder, save_figure
from ..validate import WEIGHT_FORMATS, check_seed, check_weight_format
from ..weights import is_hub_id, load_weights, resolve_checkpoint
from .benchmark import ceiling_gbps, gpu_tag
from .bytes_model import bytes_per_token


OPERATORS, FUSED, FAST = "Triton (one kernel per operator)", "Triton + fusion + split-K", "Triton, fewest kernels"
GRAPH, PDL = " + CUDA Graph", " + PDL"
SYSTEMS = ("transformers eager", "transformers static + compile", "reference eager", "reference compiled",
           OPERATORS, OPERATORS + GRAPH, FUSED, FUSED + GRAPH, FAST, FAST + GRAPH, FAST + GRAPH + PDL)
ALIASES = {"triton engine": OPERATORS, "triton engine + CUDA graph": OPERATORS + GRAPH}   # the first names
# the article's rows first; the slow compiles last (the time budget may skip them)
RUN_ORDER = (FAST + GRAPH + PDL, FAST + GRAPH, FUSED + GRAPH, OPERATORS + GRAPH, OPERATORS, FUSED, FAST,
             "reference eager", "transformers eager", "transformers static + compile", "reference compiled")
LEVEL_OF = {name + graph: level for name, level in ((OPERATORS, "operators"), (FUSED, "fused"), (FAST, "fast"))
            for graph in ("", GRAPH)} | {FAST + GRAPH + PDL: "fast"}
NOTES = {
    **{name: "decode and the prompt replayed from CUDA graphs (the prompt's captured in the set-up)"
       for name in (OPERATORS + GRAPH, FUSED + GRAPH, FAST + GRAPH, FAST + GRAPH + PDL)},
    "transformers static + compile": "decode compiled (reduce-overhead); prefill eager",
    "reference compiled": "decode compiled; prefill eager",
}


def byte_model(config, weight_format: str = "native") -> dict:
    """The bf16 decode token's HBM bytes as a + b * context (`measure.bytes_model.bytes_per_token`, with the
    projections in `weight_format`): the weights and states `a`, the KV cache's bytes per cached token `b`;
    kept in a result, which its table and plot read."""
    fixed = bytes_per_token(config, 0, weight_format=weight_format)
    return {"weight_and_state_bytes": fixed,
            "kv_bytes_per_token": bytes_per_token(config, 1, weight_format=weight_format) - fixed}


# Qwen3.5-0.8B's (docs/qwen35.md §6): what a result written before the byte model was kept in it means
_BYTES_0_8B = {"weight_and_state_bytes": 1_544_820_416, "kv_bytes_per_token": 12_288}


def recorded_bytes(result: dict, context: int) -> int:
    """HBM bytes one bf16 decode step of the result's model must move with `context` tokens cached, read from
    the byte model the result keeps (`byte_model`; `bytes_per_token` computes it from a config)."""
    model = {k: result.get(k, v) for k, v in _BYTES_0_8B.items()}
    return model["weight_and_state_bytes"] + model["kv_bytes_per_token"] * context


@dataclass
class Row:
    system: str
    prefill_ms: float | None = None
    decode_ms: dict[int, float] = field(default_factory=dict)      # context -> ms per token
    ttft_ms: dict[int, float] = field(default_factory=dict)         # prompt length -> ms to the first token
    setup_s: float | None = None                                    # build, compile, capture
    kernels: int | None = None                                      # kernels launched per decode token
    note: str = ""
    error: str = ""


def kernels_per_token(config=None, level: str = "operators", weight_format: str = "native") -> tuple[int, int]:
    """(slot calls, kernel launches) of one decode step at `level`, traced from an engine of the config's
    shapes (default Qwen3.5-0.8B) on the meta device: PyTorch references on weights without memory, so
    it runs anywhere in about a second and leaves no engine behind."""
    config = config or QWEN35_0_8B
    engine = Engine(config, meta_weights(config), max_seq_len=2, default_source="reference", cuda_graph=False,
                    prefill_chunk=1, level=level, weight_format=weight_format)
    engine.prefill([0])
    with engine.tracing() as calls:
        engine.decode()
    return len(calls), engine.ops.launches(calls)


def same_tokens(engine, other, prompt: list[int], new_tokens: int = 32) -> dict:
    """Whether the PDL engine generates the same tokens from `prompt` (greedy and sampled, one seed, each
    from a fresh sequence) as its own kernels launched without the overlap ("... without overlap": what
    PDL must not change) and as another engine built with pdl=False ("... without PDL": the same kernels,
    `Engine._launches`)."""
    out = {}
    for mode, kwargs in (("greedy", {}), ("sampled", dict(greedy=False, temperature=0.8, top_k=50, seed=1))):
        ids = engine.generate(prompt, new_tokens, **kwargs)
        with no_launch_overlap():
            out[f"{mode} without overlap"] = ids == engine.generate(prompt, new_tokens, **kwargs)
        out[f"{mode} without PDL"] = ids == other.generate(prompt, new_tokens, **kwargs)
    return out


def systems_named(names, weight_format: str = "native") -> list[str]:
    """The systems of `names` (`SYSTEMS` or `ALIASES`), in `SYSTEMS` order; None: all of them, or with 8-bit
    weights the Triton rows of the levels that run them (`plan.runs_weights`). A row of a level that does not
    run `weight_format` is a ValueError."""
    if names is None:
        names = [n for n in SYSTEMS if weight_format == "native"
                 or (n in LEVEL_OF and runs_weights(LEVEL_OF[n], weight_format))]
    unknown = [n for n in names if n not in SYSTEMS and n not in ALIASES]
    if unknown:
        raise ValueError(f"unknown systems {unknown}; choose from {list(SYSTEMS)} (or {list(ALIASES)})")
    wanted = {ALIASES.get(n, n) for n in names}
    refused = [n for n in SYSTEMS if n in wanted and n in LEVEL_OF and not runs_weights(LEVEL_OF[n], weight_format)]
    if refused:
        runs = [level for level in dict.fromkeys(LEVEL_OF.values()) if runs_weights(level, weight_format)]
        raise ValueError(f"{refused} run no {weight_format} weights (levels {runs} do)")
    return [n for n in SYSTEMS if n in wanted]


# --- the systems -----------------------------------------------------------------------------------------
def _hf_runner(model, compiled: bool):
    from transformers.generation.streamers import BaseStreamer

    class Stamps(BaseStreamer):
        """Records when each new token reaches the host (generate hands over the prompt first)."""

        def __init__(self):
            self.times: list[float] = []
            self.prompt_seen = False

        def put(self, value):
            if self.prompt_seen:
                self.times.append(time.perf_counter())
            self.prompt_seen = True

        def end(self):
            pass

    def run(prompt, n):
        stamps = Stamps()
        ids = torch.tensor([prompt], device=model.device)
        extra = {"cache_implementation": "static"} if compiled else {}
        model.generate(ids, max_new_tokens=n, do_sample=False, streamer=stamps, **extra)
        return stamps.times
    return run


def _reference_runner(model):
    def run(prompt, n):
        times = []
        with torch.no_grad():
            cache = model.new_cache(len(prompt) + n)
            logits = model(prompt, cache)
            for i in range(n):
                token = int(logits[-1].argmax())              # the host read of each token
                times.append(time.perf_counter())
                if i + 1 < n:
                    logits = model([token], cache)
        return times
    return run


def _engine_runner(engine, graph: bool):
    def run(prompt, n):
        engine.use_graph = graph
        times = []
        for _ in engine.stream(prompt, n, eos_token_id=None):
            times.append(time.perf_counter())
        return times
    return run


def warm_up(run, prompts: dict[int, list[int]], steps: int) -> None:
    """Compile and capture before timing: the largest request first (transformers sizes its static cache, and
    so its compiled graph, for the largest request it has seen), then every prompt twice (the engine captures
    a prompt chunk's graph at its second use)."""
    run(prompts[max(prompts)], steps)
    for _ in range(2):
        for prompt in prompts.values():
            run(prompt, 2)
    torch.cuda.synchronize()


def _measure(run, prompts: dict[int, list[int]], prompt_len: int, steps: int, repeats: int, row: Row) -> None:
    """row.ttft_ms[L]: time to the first token after an L-token prompt (row.prefill_ms: at prompt_len);
    row.decode_ms[L]: mean time between tokens after it. Medians over `repeats` runs."""
    for context, prompt in prompts.items():
        per_token, ttft = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            times = run(prompt, steps)
            ttft.append((times[0] - t0) * 1e3)
            per_token.append((times[-1] - times[0]) * 1e3 / (len(times) - 1))
        row.decode_ms[context] = statistics.median(per_token)
        row.ttft_ms[context] = statistics.median(ttft)
    row.prefill_ms = row.ttft_ms[prompt_len]


# --- the table ---------------------------------------------------------------------------------------------
def _decode_ms(row: dict) -> dict[int, float]:
    """{context: ms per token} of a result row (JSON turns the int keys into strings)."""
    return {int(c): ms for c, ms in row["decode_ms"].items()}


def markdown(result: dict) -> str:
    ceiling, contexts = result["ceiling_gbps"], result["contexts"]
    c0 = contexts[0]
    fixed, per_kv = (recorded_bytes(result, 0), recorded_bytes(result, 1) - recorded_bytes(result, 0))
    fmt = result.get("weights", "native")
    weights = "" if fmt == "native" else (f" The Triton rows read {fmt} weights (every projection and the LM "
                                          f"head); the floor counts those and their scales.")
    lines = [f"# {_model_name(result)} on {result['gpu']}, {result['date']}", "",
             f"{result['dtype']}, batch 1, greedy, random weights of the real shapes; {result['versions']}."
             f"{weights} "
             f"Prefill: {result['prompt_len']}-token prompt, time to the first token. Decode: mean time per "
             f"token over {result['steps']} tokens after a prompt of L tokens, median of {result['repeats']} "
             f"runs; every system hands each token to the host as it comes. Bandwidth floor: "
             f"{fixed:,} + {per_kv:,} x L bytes per token at the measured copy "
             f"bandwidth of {ceiling:.0f} GB/s. Kernels: launched per decode token.", "",
             f"| system | prefill {result['prompt_len']} tok (ms) | decode @{c0} (ms/tok) | tokens/s | GB/s | "
             "% of bandwidth floor | kernels | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        kernels = "-" if r.get("kernels") is None else str(r["kernels"])
        if r["error"] or c0 not in _decode_ms(r):
            lines.append(f"| {r['system']} | - | - | - | - | - | {kernels} | {r['error'] or r['note']} |")
            continue
        ms = _decode_ms(r)[c0]
        gbps = recorded_bytes(result, c0) / (ms * 1e-3) / 1e9
        lines.append(f"| {r['system']} | {r['prefill_ms']:.1f} | {ms:.3f} | {1e3 / ms:.0f} | {gbps:.0f} | "
                     f"{100 * gbps / ceiling:.1f}% | {kernels} | {r['note']} |")
    lines += ["", "Decode per token by context length L: ms/token (% of the bandwidth floor)", "",
              "| system | " + " | ".join(f"L = {c}" for c in contexts) + " |",
              "|---" * (len(contexts) + 1) + "|"]
    for r in result["rows"]:
        cells = []
        for c in contexts:
            ms = _decode_ms(r).get(c)
            cells.append("-" if ms is None else
                         f"{ms:.3f} ({100 * recorded_bytes(result, c) / (ms * 1e-3) / 1e9 / ceiling:.1f}%)")
        lines.append(f"| {r['system']} | " + " | ".join(cells) + " |")
    lines += ["", "Time to the first token by prompt length L: ms", "",
              "| system | " + " | ".join(f"L = {c}" for c in contexts) + " |",
              "|---" * (len(contexts) + 1) + "|"]
    for r in result["rows"]:
        ttft = {int(k): v for k, v in (r.get("ttft_ms") or {}).items()}      # JSON keys come back as str
        lines.append(f"| {r['system']} | " + " | ".join("-" if c not in ttft else f"{ttft[c]:.2f}"
                                                        for c in contexts) + " |")
    setup = [f"{r['system']} {r['setup_s']:.0f} s" for r in result["rows"] if r["setup_s"] is not None]
    lines += ["", "Set-up (build, compile, capture): " + ", ".join(setup) + "."]
    if result.get("pdl_tokens"):
        same = ", ".join(f"{mode} {'identical' if ok else 'DIFFERENT'}" for mode, ok in result["pdl_tokens"].items())
        lines += ["", f"Tokens of the fewest-kernels engine with PDL against its kernels launched without the "
                      f"overlap, and against the engine built without PDL: {same}."]
    if result.get("levels"):
        lines += ["", "The slot each step of the Triton engine runs at each level (prefill / decode):", "",
                  result["levels"]]
    return "\n".join(lines) + "\n"


def _model_name(result: dict) -> str:
    """The title's model: the preset the shapes came from (Qwen3.5-0.8B unless the result names another)."""
    name = result.get("config", "qwen3.5-0.8b")
    return name.replace("qwen", "Qwen").replace("b", "B") if name.startswith("qwen3.5-") else name


def plot(result: dict, path: Path | None = None):
    """Decode tokens/s per system and context (labelled with % of the bandwidth floor) beside the prefill
    times; saved to `path` if given. Returns the matplotlib Figure (made without pyplot: no backend change)."""
    from matplotlib.figure import Figure
    rows = [{**r, "decode_ms": _decode_ms(r)} for r in result["rows"] if r["decode_ms"]]
    contexts, ceiling = result["contexts"], result["ceiling_gbps"]
    fig = Figure(figsize=(14, 0.5 * len(rows) + 2.5))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    h = 0.8 / len(contexts)
    for j, c in enumerate(contexts):
        ys = [i + j * h for i in range(len(rows))]
        tps = [1e3 / r["decode_ms"][c] if c in r["decode_ms"] else 0 for r in rows]
        bars = ax1.barh(ys, tps, height=h, label=f"L = {c}")
        for bar, r in zip(bars, rows):
            if c in r["decode_ms"]:
                pct = 100 * recorded_bytes(result, c) / (r["decode_ms"][c] * 1e-3) / 1e9 / ceiling
                ax1.text(bar.get_width(), bar.get_y() + h / 2, f" {pct:.0f}%", va="center", fontsize=7)
    floor_tps = ceiling * 1e9 / recorded_bytes(result, contexts[0])
    ax1.axvline(floor_tps, color="k", ls="--", lw=0.8, label=f"bandwidth floor, L = {contexts[0]}")
    ax1.set_yticks([i + h * (len(contexts) - 1) / 2 for i in range(len(rows))], [r["system"] for r in rows])
    ax1.invert_yaxis()
    ax1.set_xlabel("decode tokens/s (labels: % of the bandwidth floor)")
    ax1.legend(fontsize=8)
    prefill = [r for r in rows if r["prefill_ms"]]
    ax2.barh([r["system"] for r in prefill], [r["prefill_ms"] for r in prefill], color="tab:gray")
    ax2.invert_yaxis()
    ax2.set_xlabel(f"prefill of {result['prompt_len']} tokens (ms, time to first token)")
    ax2.set_yticklabels([])
    fig.suptitle(f"{_model_name(result)} on {result['gpu']}, {result['date']} ({result['dtype']}, batch 1)")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path, dpi=120)
    return fig


def write(result: dict, folder: Path) -> None:
    results_folder(folder)
    atomic_write_text(folder / "bench.json", json.dumps(result, indent=1))
    atomic_write_text(folder / "bench.md", markdown(result))
    if any(r["decode_ms"] for r in result["rows"]):
        plot(result, folder / "bench.png")


# --- the run -----------------------------------------------------------------------------------------------
def _substitute_shape_str() -> None:
    """The references format shapes into their error messages with `str(list(shape))`, which torch.compile
    cannot trace (a graph break per op). Give it a traceable equivalent; eager code is unchanged."""
    if getattr(_substitute_shape_str, "done", False):
        return

    @torch.compiler.substitute_in_graph(precision.shape_str, skip_signature_check=True)
    def shape_str(x):
        return "[" + ", ".join(str(s) for s in x.shape) + "]"
    _substitute_shape_str.done = True


def build(model_source: str, seed: int = 0, config_name: str | None = None):
    """(transformers model, our weights dict, config) of the same weights, bf16 on the GPU: random ones of
    the preset `config_name`'s shapes (default Qwen3.5-0.8B), or a checkpoint's (which brings its config)."""
    if model_source == "random":
        config = PRESETS[config_name] if config_name else QWEN35_0_8B
        hf = hf_model(config, dtype=torch.bfloat16, device="cuda", seed=seed)
        weights = weights_from_hf(hf)
    elif config_name:
        raise ValueError(f"--config {config_name} gives the shapes of random weights; the checkpoint "
                         f"{model_source} brings its own config: leave --config out")
    else:
        hf, weights, config = read_checkpoint(model_source, "cuda")
    hf.generation_config.eos_token_id = None          # always generate the tokens asked for
    hf.generation_config.pad_token_id = 0
    return hf, weights, config


def read_checkpoint(source: str, device) -> tuple:
    """(transformers model, weights dict, config), each side reading the files itself: transformers through its
    `from_pretrained`, the engines and the reference model through the course's loader in bf16
    (`weights.load_weights`, what `Engine.from_pretrained` runs), so the bench runs the path a user runs."""
    root = resolve_checkpoint(source)
    hf = hf_from_pretrained(root, dtype=torch.bfloat16).to(device).eval()
    config, weights = load_weights(root, dtype=torch.bfloat16, device=device)
    return hf, weights, config


def _fla_version() -> str:
    """", flash-linear-attention X" where it imports: transformers then runs Qwen3.5's DeltaNet layers through
    its kernels (the strongest baseline for them), else through its own PyTorch path."""
    try:
        import fla
    except Exception:  # noqa: BLE001  (absent or broken: transformers takes its PyTorch path)
        return ""
    return f", flash-linear-attention {fla.__version__}"


def run(args) -> dict:
    import transformers                 # optional and heavy (triton: after `setup`): only a run needs them
    import triton

    start = time.perf_counter()
    contexts = sorted(set(args.contexts) | {args.prompt_len})
    date = datetime.date.today().isoformat()
    config_name = getattr(args, "config", None)
    fmt = getattr(args, "weights", "native")
    named = f"{config_name}_" if config_name and config_name != "qwen3.5-0.8b" else ""
    named += "" if fmt == "native" else f"{fmt}_"
    folder = Path(args.out) / f"engine_{named}{gpu_tag()}_{date}"
    hf, weights, config = build(args.model, args.seed, config_name)
    result = {"gpu": torch.cuda.get_device_name(), "date": date, "dtype": "bfloat16", "model": args.model,
              "config": config_name or ("qwen3.5-0.8b" if args.model == "random" else str(args.model)),
              "weights": fmt, **byte_model(config, fmt),
              "versions": f"torch {torch.__version__}, triton {triton.__version__}, transformers "
                          f"{transformers.__version__}" + _fla_version(),
              "prompt_len": args.prompt_len, "contexts": contexts, "steps": args.steps, "repeats": args.repeats,
              "ceiling_gbps": ceiling_gbps(), "rows": []}
    gen = torch.Generator().manual_seed(args.seed)
    prompts = {c: torch.randint(0, config.vocab_size, (c,), generator=gen).tolist() for c in contexts}
    max_len = max(contexts) + args.steps + 8
    engines = {}                                       # (level, pdl) -> the engine its rows share
    merged = None                                      # the merged projections, shared by every engine
    rows = {name: Row(name, note=NOTES.get(name, "")) for name in systems_named(args.systems, fmt)}
    counts = {level: kernels_per_token(config, level, fmt) for level in sorted({LEVEL_OF[n] for n in rows
                                                                           if n in LEVEL_OF})}
    result["kernels_per_token"] = {level: {"slot calls": c, "kernels": k} for level, (c, k) in counts.items()}
    if counts:
        result["levels"] = levels_markdown(fmt)
    for name, row in rows.items():
        if name in LEVEL_OF:
            calls, row.kernels = counts[LEVEL_OF[name]]
            row.note = f"{calls} slot calls per decode token" + (f"; {row.note}" if row.note else "")
    for level, (calls, launched) in counts.items():
        print(f"level {level}: {calls} slot calls, {launched} kernels per decode token", file=sys.stderr)

    def runner(name):
        nonlocal merged
        if name.startswith("transformers"):
            return _hf_runner(hf, compiled="compile" in name)
        if name == "reference eager":
            return _reference_runner(Qwen35Model(config, weights))
        if name == "reference compiled":
            _substitute_shape_str()
            ref_engine = Engine(config, weights, max_seq_len=max_len, default_source="reference", cuda_graph=False)
            return _engine_runner(ref_engine.compile(fullgraph=True), graph=False)
        key = LEVEL_OF[name], name.endswith(PDL)
        if key not in engines:   # the kernels TRITONLLM_KERNELS selects ("auto": yours where filled in)
            engines[key] = Engine(config, weights, max_seq_len=max_len, level=key[0], pdl=key[1], merged=merged,
                                  weight_format=fmt)
            merged = engines[key].weights
            print(f"    {key[0]}: {kernels.sources_line(engines[key].ops.sources())}", file=sys.stderr)
        return _engine_runner(engines[key], graph=GRAPH in name)

    for name in [n for n in RUN_ORDER if n in rows]:
        row = rows[name]
        if time.perf_counter() - start > args.budget_s:
            row.error = f"skipped: the run's time budget of {args.budget_s:.0f} s was spent"
            continue
        print(f"[{time.perf_counter() - start:6.0f} s] {name} ...", file=sys.stderr, flush=True)
        try:
            t0 = time.perf_counter()
            fn = runner(name)
            warm_up(fn, prompts, args.steps)
            row.setup_s = time.perf_counter() - t0
            _measure(fn, prompts, args.prompt_len, args.steps, args.repeats, row)
        except Exception as e:  # noqa: BLE001  (one failing system must not lose the others' numbers)
            row.error = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            torch.cuda.synchronize()
        result["rows"] = [asdict(r) for r in (rows[n] for n in SYSTEMS if n in rows)]
        write(result, folder)
        print(f"    {row.error or f'decode {row.decode_ms}, prefill {row.prefill_ms:.1f} ms'}", file=sys.stderr)
    if ("fast", True) in engines and ("fast", False) in engines:
        result["pdl_tokens"] = same_tokens(engines[("fast", True)], engines[("fast", False)], prompts[args.prompt_len])
        print(f"    PDL against no PDL: {result['pdl_tokens']}", file=sys.stderr)
    result["folder"] = str(folder)
    result["seconds"] = time.perf_counter() - start
    write(result, folder)
    return result


def measure(systems=None, contexts=(128, 1024, 4096), prompt_len: int = 128, steps: int = 32,
            repeats: int = 3, out: str | Path = "results", model: str = "random", budget_s: float = 420.0,
            seed: int = 0, config: str | None = None, weights: str = "native") -> dict:
    """`tritonllm-course bench` from Python (a GPU only); returns the result dict (see `markdown`, `plot`)."""
    return run(argparse.Namespace(systems=None if systems is None else list(systems), contexts=list(contexts),
                                  prompt_len=prompt_len, steps=steps, repeats=repeats, out=str(out), model=model,
                                  budget_s=budget_s, seed=seed, config=config, weights=weights))


# --- the command line --------------------------------------------------------------------------------------
def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `bench` subcommand to an argparse `subparsers` object; returns its parser."""
    p = subparsers.add_parser("bench", help="the benchmark table: transformers, the reference model and the "
                              "Triton engine, prefill and decode (GPU only)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results", help="parent folder of the results folder (default: results)")
    p.add_argument("--model", default="random", help="'random' (default) or a checkpoint directory / hub id")
    p.add_argument("--config", choices=sorted(FAMILY), default=None,
                   help="the shapes of --model random: a size of the Qwen3.5 family (default qwen3.5-0.8b)")
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 1024, 4096],
                   help="context lengths of the decode measurements")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt of the prefill measurement")
    p.add_argument("--steps", type=int, default=32, help="tokens generated per decode measurement")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--systems", nargs="+", choices=SYSTEMS + tuple(ALIASES), default=None,
                   metavar="SYSTEM", help=f"a subset of: {'; '.join(SYSTEMS)} (default: all; with 8-bit --weights "
                   "the Triton rows of the levels that run them)")
    p.add_argument("--weights", default="native", metavar="FORMAT",
                   help=f"the Triton rows' projection weights, one of {', '.join(WEIGHT_FORMATS)}: the model "
                   "dtype (native, default) or 8-bit")
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="start no new system after this many seconds (default 420)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run_bench)
    return p


def _check_model_and_lengths(args) -> None:
    """--model names a checkpoint folder or a hub id, and the longest decode (a context, then --steps tokens)
    fits the model's positions: both said before the bench measures anything (a hub id's config is read only
    once it is downloaded, on the GPU)."""
    from ..config import get_config
    if not args.model.strip():      # Path("") is the current folder: it was searched for a config.json
        raise ValueError("--model is empty: give 'random', a checkpoint directory or a hub id")
    if args.model == "random":
        config = get_config(args.config or "qwen3.5-0.8b")
    elif is_hub_id(args.model) and not Path(args.model).expanduser().exists():
        config = None
    else:
        try:
            config = get_config(resolve_checkpoint(args.model))   # a folder, or neither a folder nor a hub id
        except (OSError, ValueError) as e:
            raise ValueError(f"--model {args.model}: {e}") from None
    longest = max([*args.contexts, args.prompt_len]) + args.steps
    if config is not None and longest > config.max_position_embeddings:
        raise ValueError(f"--contexts / --prompt-len with --steps reach {longest} positions, more than the "
                         f"model's {config.max_position_embeddings}")


def run_bench(args) -> int:
    """Run `tritonllm-course bench`; returns the exit status."""
    bad = [f"{name} must be {rule}" for name, rule, broken in (
        ("--steps", ">= 2", args.steps < 2), ("--repeats", ">= 1", args.repeats < 1),
        ("--prompt-len", ">= 1", args.prompt_len < 1), ("every --contexts", ">= 1", min(args.contexts) < 1),
        ("--budget-s", "above 0", not args.budget_s > 0)) if broken]                            # NaN: refused
    if bad:
        print(f"tritonllm-course bench: error: {'; '.join(bad)}", file=sys.stderr)
        return 2
    if args.config and args.model != "random":
        print(f"tritonllm-course bench: error: --config {args.config} gives the shapes of random weights; the "
              f"checkpoint {args.model} brings its own config: leave --config out", file=sys.stderr)
        return 2
    try:
        check_weight_format(args.weights, "--weights")
        check_seed(args.seed, "--seed")           # the random weights' seed, as generate's: torch took -1
        systems_named(args.systems, args.weights)
        check_out_folder(args.out)                # a file or a dangling link in the way: said before the minutes
        _check_model_and_lengths(args)
    except ValueError as e:
        print(f"tritonllm-course bench: error: {e}", file=sys.stderr)
        return 2
    rt = setup(quiet=True)
    if not rt.on_gpu:
        print("tritonllm-course bench: skipped: it measures GPU kernels and needs a CUDA GPU; this machine runs "
              "the kernels in Triton's CPU interpreter, whose times say nothing about a GPU", file=sys.stderr)
        return 1
    result = run(args)
    print(markdown(result))
    print(f"written to {result['folder']}", file=sys.stderr)
    return 0 if all(not r["error"] for r in result["rows"]) else 1
