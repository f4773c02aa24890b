"""GPU measurements of chapter 24_split_k's split-K GEMV at Qwen3.5-0.8B's decode shapes.

- `compare`: at one shape, the two split-K variants (two-stage; atomic with its accumulator kept zeroed
  by the cast step; the atomic kernel alone, as when neighbouring kernels zero and read the accumulator)
  against chapter 05_projections's GEMV and cuBLAS (`F.linear`);
- `sweep`: time against the number of pieces of K;
- `run_to_run`: how much the output of a kernel varies over repeated runs on the same inputs (the atomic
  variant's order of additions changes; the two-stage one's must not).
Every time is a CUDA-graph replay over input sets larger than L2 (`benchmark.time_calls`), best of 3.

    python -m tritonllm_course.measure.splitk_bench --out results/       # on a GPU machine
"""
from __future__ import annotations

import json
import math

import torch

from .benchmark import ceiling_gbps, gpu_script, results_stem, time_calls
from ..runtime import runtime
from ..safe_files import atomic_write_text, save_figure

SHAPES = [(1024, 2048), (1024, 3584), (248320, 1024)]       # o_proj / out_proj, MLP down, LM head
SPLITS = (1, 2, 4, 7, 8, 14, 16, 32)                        # asked for; `splitk_config` says what is used
PEERS = ("cuBLAS (F.linear)", "GEMV (chapter 05)")   # the records' keys (results/splitk_*.json)
DEVICE = "cuda"                                             # the tests run the plumbing on the CPU


def run_to_run(fn, runs: int = 20) -> dict:
    """Call `fn()` `runs` times on the same inputs: is every output the first one, bit for bit?"""
    first = fn().clone()
    max_diff, differing, identical = 0.0, 0, True
    for _ in range(runs - 1):
        y = fn()
        if not torch.equal(y, first):
            identical = False
            d = (y.double() - first.double()).abs()
            max_diff = max(max_diff, d.max().item())
            differing = max(differing, int((y != first).sum()))
    return {"runs": runs, "identical": identical, "max_abs_diff": max_diff, "differing": differing,
            "of": first.numel()}


def _inputs(shape, dtype, device, gen):
    from .. import slots
    return slots.get("splitk_gemv").make_inputs(shape, dtype, device, gen)      # x [1, K], weight [N, K]


def _input_sets(N, K, dtype, min_bytes=256 * 2**20):
    gen = torch.Generator(device=DEVICE).manual_seed(N + K)
    copies = max(1, min(64, math.ceil(min_bytes / (N * K * dtype.itemsize))))
    return [_inputs({"M": 1, "N": N, "K": K}, dtype, DEVICE, gen) for _ in range(copies)]


def _best_of(fn, sets, tries=3):
    return min(time_calls(fn, sets) for _ in range(tries))


def _variants(splitk, N, K, split, sms):
    """{label: callable(x, weight)} of the split-K variants at `split` pieces (None: choose_split)."""
    import triton
    acc = torch.zeros(N, dtype=torch.float32, device=DEVICE)        # kept: each call leaves it zeroed
    scratch = torch.zeros(N, dtype=torch.float32, device=DEVICE)    # the atomic kernel alone adds into it
    cfg = splitk.splitk_config(N, K, split, sms, runtime().interpreted)
    grid = (triton.cdiv(N, cfg["BLOCK_N"]), cfg["SPLIT"])

    def atomic_kernel_only(x, weight):
        splitk.splitk_atomic_kernel[grid](x, weight, scratch, N, K, cfg["K_SPLIT"], BLOCK_N=cfg["BLOCK_N"],
                                          BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"])

    return cfg["SPLIT"], {
        "split-K two-stage": lambda x, weight: splitk.splitk_gemv(x, weight, split=split),
        "split-K atomic": lambda x, weight: splitk.splitk_gemv_atomic(x, weight, split=split, acc=acc),
        "atomic kernel alone": atomic_kernel_only,
    }


def _peers(linear) -> dict:
    import torch.nn.functional as F
    return {PEERS[0]: lambda x, weight: F.linear(x, weight), PEERS[1]: linear.gemv}


def compare(N, K, splitk, linear, dtype=torch.bfloat16, split=None) -> dict:
    """Microseconds of every implementation at one shape: {"N", "K", "split", "bytes", "us": {label: us}}."""
    sets = _input_sets(N, K, dtype)
    used, impls = _variants(splitk, N, K, split, splitk.device_sms(torch.device(DEVICE)))
    return {"N": N, "K": K, "split": used, "bytes": (N * K + K + N) * dtype.itemsize,
            "us": {label: _best_of(fn, sets) for label, fn in {**_peers(linear), **impls}.items()}}


def sweep(N, K, splitk, linear, dtype=torch.bfloat16, splits=SPLITS, peers_us: dict | None = None) -> dict:
    """Time against the number of pieces: {"N", "K", "chosen", "peers": {label: us}, "points": [...]}.
    peers_us: the GEMV's and cuBLAS's times when already measured (`compare`'s "us")."""
    sms = splitk.device_sms(torch.device(DEVICE))
    sets = _input_sets(N, K, dtype)
    if peers_us is None:
        peers_us = {label: _best_of(fn, sets) for label, fn in _peers(linear).items()}
    points, seen = [], set()
    for split in splits:
        used, impls = _variants(splitk, N, K, split, sms)
        if used not in seen:
            seen.add(used)
            points.append({"split": used, "us": {label: _best_of(fn, sets) for label, fn in impls.items()}})
    return {"N": N, "K": K, "chosen": splitk.splitk_config(N, K, None, sms, runtime().interpreted)["SPLIT"],
            "peers": {p: peers_us[p] for p in PEERS}, "points": points}


def spread(N, K, splitk, runs=20) -> dict:
    """Run-to-run variation of both variants, in bf16 and in fp32 (where it is the accumulator's)."""
    out = {}
    for dtype in (torch.bfloat16, torch.float32):
        inp = _inputs({"M": 1, "N": N, "K": K}, dtype, DEVICE, torch.Generator(device=DEVICE).manual_seed(1))
        acc = torch.zeros(N, dtype=torch.float32, device=DEVICE)
        name = str(dtype).replace("torch.", "")
        out[f"two-stage {name}"] = run_to_run(lambda: splitk.splitk_gemv(**inp), runs)
        out[f"atomic {name}"] = run_to_run(lambda: splitk.splitk_gemv_atomic(**inp, acc=acc), runs)
    return out


def plot_sweep(result: dict, ax=None):
    """Time against pieces of K for each variant, the GEMV and cuBLAS as lines, the chosen split marked."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    xs = [p["split"] for p in result["points"]]
    for label in result["points"][0]["us"]:
        ax.plot(xs, [p["us"][label] for p in result["points"]], marker="o", label=label)
    for (label, us), style in zip(result["peers"].items(), ("--", ":")):
        ax.axhline(us, color="k", ls=style, lw=1, label=f"{label} {us:.1f} us")
    ax.axvline(result["chosen"], color="tab:red", lw=0.8, alpha=0.6,
               label=f"choose_split: {result['chosen']}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("pieces of K (SPLIT)")
    ax.set_ylabel("microseconds")
    ax.set_title(f"{result['N']} x {result['K']}")
    ax.legend(fontsize=7)
    return ax


def plot_compare(results: list[dict], ceiling_gbps: float, ax=None):
    """% of the copy ceiling of every implementation at every shape (times written on the bars)."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(9, 1.2 + 1.3 * len(results)))[1]
    labels = list(results[0]["us"])
    h = 0.8 / len(labels)
    for j, label in enumerate(labels):
        ys = [i + j * h for i in range(len(results))]
        pct = [100 * r["bytes"] / (r["us"][label] * 1e-6) / 1e9 / ceiling_gbps for r in results]
        bars = ax.barh(ys, pct, height=h, label=label)
        for bar, r in zip(bars, results):
            ax.text(bar.get_width(), bar.get_y() + h / 2, f" {r['us'][label]:.1f} us", va="center",
                    fontsize=7)
    ax.set_yticks([i + 0.4 - h / 2 for i in range(len(results))],
                  [f"{r['N']} x {r['K']}\nsplit {r['split']}" for r in results])
    ax.invert_yaxis()
    ax.axvline(100, color="k", lw=0.8)
    ax.set_xlabel(f"% of the measured copy bandwidth ({ceiling_gbps / 1000:.2f} TB/s)")
    ax.legend(fontsize=7, loc="lower right")
    return ax


def main(argv=None) -> int:
    started = gpu_script(__doc__, argv)
    if started is None:
        return 1
    args, rt = started
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .. import kernels
    splitk = kernels.load("splitk", "solutions").module
    linear = kernels.load("linear", "solutions").module
    ceiling = ceiling_gbps()
    compared = [compare(N, K, splitk, linear) for N, K in SHAPES]
    swept = [sweep(r["N"], r["K"], splitk, linear, peers_us=r["us"]) for r in compared]
    spreads = {f"{N}x{K}": spread(N, K, splitk) for N, K in SHAPES[:2]}
    stem, date = results_stem(args.out, "splitk")
    out, tag = stem.parent, stem.name
    atomic_write_text(out / f"{tag}.json", json.dumps(
        {"gpu": rt.gpu_name, "date": date, "summary": rt.summary(), "ceiling_gbps": ceiling,
         "compare": compared, "sweep": swept, "spread": spreads}, indent=1))
    fig, axes = plt.subplots(1, len(swept), figsize=(6 * len(swept), 3.8))
    for ax, result in zip(axes, swept):
        plot_sweep(result, ax)
    fig.tight_layout()
    save_figure(fig, out / f"{tag}_sweep.png", dpi=120)
    save_figure(plot_compare(compared, ceiling).figure, out / f"{tag}_compare.png", dpi=120, bbox_inches="tight")
    for r in compared:
        print(f"{r['N']} x {r['K']} (split {r['split']}): "
              + ", ".join(f"{label} {us:.2f} us" for label, us in r["us"].items()))
    for shape, s in spreads.items():
        print(shape, json.dumps(s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
