"""Decode from 8-bit weights beside bf16, in one process on one GPU (chapter 31_weight_quant).

One set of random weights of Qwen3.5-0.8B's real shapes (written by transformers, as `bench` builds them) is read
by the engine's fewest-kernels level, replayed from its CUDA graph with PDL, once per weight format: the model
dtype (native), int8 with a scale per output row, fp8 e4m3 with a scale per row (sm_89 and newer). Beside them,
in the same process: the bf16 engine without PDL and transformers eager, the baselines.

Measured per row (`engine_bench._measure`): time to the first token after prompts of each context length and
decode ms per token after them. The floor of each row is its own byte model (`bytes_model.bytes_per_token` with
the row's weight format: 8-bit projections and their scales) at the measured copy bandwidth.

Accuracy beside the speed: for each 8-bit format, (a) the course's reference model with every projection and the
LM head quantized and dequantized, against bf16 (`quant_accuracy.evaluate`: next-token KL and top-1 agreement
over a 64-token prompt), (b) the engine's own greedy tokens against the bf16 engine's, counted token by token
(tokens are called equal only when they are).

`python -m tritonllm_course.measure.weights_bench --out results` writes results/weights_<gpu>_<date>.{json,md}.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..engine import Engine
from ..runtime import setup
from ..safe_files import atomic_write_text, check_out_folder, results_folder
from ..triton_helpers import FP8_CAPABILITY
from ..validate import check_seed
from .benchmark import ceiling_gbps, gpu_tag
from .engine_bench import Row, _engine_runner, _hf_runner, _measure, build, byte_model, recorded_bytes, warm_up
from .quant_accuracy import evaluate, prompt_ids

FORMATS = ("native", "int8", "fp8")
BASELINES = ("fast, graph, no PDL (native)", "transformers eager")


def _row_name(fmt: str) -> str:
    return f"fast, graph, PDL ({fmt})"


def floor_ms(row_bytes: dict, context: int, ceiling: float) -> float:
    """The row's bandwidth floor in ms: its byte model's bytes at `context` at `ceiling` GB/s."""
    return recorded_bytes(row_bytes, context) / (ceiling * 1e6)


def token_agreement(a: list[int], b: list[int]) -> dict:
    """How many leading tokens two greedy sequences share, and how many positions agree."""
    lead = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"identical": a == b, "leading_equal": lead, "equal_positions": sum(x == y for x, y in zip(a, b)),
            "tokens": len(a)}


def run(args) -> dict:
    import transformers
    import triton

    start = time.perf_counter()
    contexts = sorted(set(args.contexts))
    major, minor = torch.cuda.get_device_capability()
    formats = [f for f in FORMATS if f != "fp8" or 10 * major + minor >= FP8_CAPABILITY]
    hf, weights, config = build("random", args.seed)
    ceiling = ceiling_gbps()
    result = {"gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "dtype": "bfloat16",
              "versions": f"torch {torch.__version__}, triton {triton.__version__}, transformers "
                          f"{transformers.__version__}",
              "contexts": contexts, "steps": args.steps, "repeats": args.repeats, "ceiling_gbps": ceiling,
              "bytes": {f: byte_model(config, f) for f in formats}, "rows": [], "accuracy": {}, "tokens": {},
              "command": "python -m tritonllm_course.measure.weights_bench --out results"}
    gen = torch.Generator().manual_seed(args.seed)
    prompts = {c: torch.randint(0, config.vocab_size, (c,), generator=gen).tolist() for c in contexts}
    max_len = max(contexts) + args.steps + 8
    greedy = {}
    systems = [(_row_name(f), f, True) for f in formats] + [(BASELINES[0], "native", False), (BASELINES[1], None, None)]
    for name, fmt, pdl in systems:
        row = Row(name, note="" if fmt is None else f"weights {fmt}")
        print(f"[{time.perf_counter() - start:6.0f} s] {name} ...", file=sys.stderr, flush=True)
        try:
            t0 = time.perf_counter()
            if fmt is None:
                fn = _hf_runner(hf, compiled=False)
            else:
                engine = Engine(config, weights, max_seq_len=max_len, level="fast", pdl=pdl, weight_format=fmt)
                fn = _engine_runner(engine, graph=True)
            warm_up(fn, prompts, args.steps)
            row.setup_s = time.perf_counter() - t0
            _measure(fn, prompts, contexts[0], args.steps, args.repeats, row)
            if fmt is not None:
                greedy[name] = engine.generate(prompts[contexts[0]], args.steps)
                del engine
        except Exception as e:  # noqa: BLE001  (one failing row must not lose the others' numbers)
            row.error = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        result["rows"].append({**asdict(row), "weights": fmt})
        print(f"    {row.error or f'decode {row.decode_ms}, ttft {row.ttft_ms}'}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    base = greedy.get(_row_name("native"))
    for f in formats[1:]:
        if base is not None and _row_name(f) in greedy:
            result["tokens"][f] = token_agreement(base, greedy[_row_name(f)])
    if base is not None and BASELINES[0] in greedy:
        result["tokens"]["native without PDL"] = token_agreement(base, greedy[BASELINES[0]])
    del hf
    ids = prompt_ids(config.vocab_size, 64, args.seed).to(weights["embed_tokens.weight"].device)
    with torch.no_grad():
        result["accuracy"] = evaluate(config, weights, ids, formats=[f for f in formats if f != "native"])
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def markdown(result: dict) -> str:
    ceiling, contexts = result["ceiling_gbps"], result["contexts"]
    lines = [f"# Qwen3.5-0.8B decode by weight format on {result['gpu']}, {result['date']}", "",
             f"bf16 activations, batch 1, greedy, random weights of the real shapes; {result['versions']}. "
             f"Decode: mean ms per token over {result['steps']} tokens after a prompt of L tokens, median of "
             f"{result['repeats']} runs; TTFT: time to the first token after that prompt. Each row's floor: its "
             f"own bytes (the weight format's) at the measured copy bandwidth of {ceiling:.0f} GB/s. One process.",
             "", "| system | " + " | ".join(f"decode @{c} (ms) | % of its floor" for c in contexts)
             + " | " + " | ".join(f"TTFT {c} (ms)" for c in contexts) + " |",
             "|---" * (1 + 3 * len(contexts)) + "|"]
    for r in result["rows"]:
        if r["error"]:
            lines.append(f"| {r['system']} | {r['error']} |")
            continue
        fmt = r["weights"] or "native"
        cells = []
        for c in contexts:
            ms = r["decode_ms"][str(c)] if str(c) in r["decode_ms"] else r["decode_ms"][c]
            floor = floor_ms(result["bytes"][fmt], c, ceiling)
            cells += [f"{ms:.3f}", f"{100 * floor / ms:.0f}%" if r["weights"] else "-"]
        ttft = [r["ttft_ms"].get(str(c), r["ttft_ms"].get(c)) for c in contexts]
        lines.append(f"| {r['system']} | " + " | ".join(cells) + " | " + " | ".join(f"{t:.2f}" for t in ttft) + " |")
    acc = result.get("accuracy", {}).get("formats", {})
    if acc:
        lines += ["", "Accuracy of the reference model with 8-bit weights against bf16 (64-token prompt):", "",
                  "| format | KL mean | KL max | top-1 agreement |", "|---|---|---|---|"]
        lines += [f"| {f} | {a['kl_mean']:.4f} | {a['kl_max']:.4f} | {a['top1_agreement_pct']:.0f}% |"
                  for f, a in acc.items()]
    if result.get("tokens"):
        lines += ["", "The engine's greedy tokens against the bf16 engine's (PDL):", ""]
        lines += [f"- {f}: {t['equal_positions']} of {t['tokens']} positions equal, the first {t['leading_equal']} "
                  f"in a row{' (identical)' if t['identical'] else ''}" for f, t in result["tokens"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tritonllm_course.measure.weights_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results", help="folder of the results (default: results)")
    p.add_argument("--contexts", type=int, nargs="+", default=[128, 4096], help="context lengths (default 128 4096)")
    p.add_argument("--steps", type=int, default=32, help="tokens generated per decode measurement")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 2 or args.repeats < 1 or min(args.contexts) < 1:
        print("weights_bench: error: --steps must be >= 2, --repeats >= 1 and every --contexts >= 1", file=sys.stderr)
        return 2
    try:
        check_seed(args.seed, "--seed")           # the random weights' seed, as generate's: torch took -1
        check_out_folder(args.out)                # a file or a dangling link in the way: said before the minutes
    except ValueError as e:                       # UnsafeWrite is one
        print(f"weights_bench: error: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or not setup(quiet=True).on_gpu:
        print("weights_bench: skipped: it measures GPU kernels and needs a CUDA GPU", file=sys.stderr)
        return 1
    result = run(args)
    folder = Path(args.out)
    results_folder(folder)
    stem = f"weights_{gpu_tag()}_{result['date']}"
    atomic_write_text(folder / f"{stem}.json", json.dumps(result, indent=1))
    atomic_write_text(folder / f"{stem}.md", markdown(result))
    print(markdown(result))
    return 0 if all(not r["error"] for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
