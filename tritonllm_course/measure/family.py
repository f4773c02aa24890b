"""The dense Qwen3.5 family on one GPU: each size's benchmark, then one table and one plot of them all.

    python -m tritonllm_course.measure.family --out results [--sizes qwen3.5-2b qwen3.5-4b ...]
    python -m tritonllm_course.measure.family --out results --collect      (the table and plot only)

Each size runs `tritonllm-course bench --config <size>` in a process of its own (random weights of its real
shapes, bf16, batch 1; a 27B's 54 GB of weights freed before the next size starts), every engine level
under its CUDA graph beside transformers eager and with static cache + torch.compile, decode at
`CONTEXTS` (which also gives the time to the first token of prompts of 128 and 2,048 tokens), into
OUT/engine_<size>_<gpu>_<date>/ (0.8B: OUT/engine_<gpu>_<date>/). `collect` reads the newest folder of each
size under OUT, whatever its GPU (keep one GPU's benches in an OUT), and writes OUT/family_<gpu>_<date>.{md,json,png}
(the GPU of the first size's): decode per token against the bytes a token moves, the bandwidth floor drawn as the
line bytes / copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from ..config import FAMILY
from ..safe_files import UnsafeWrite, atomic_write_text, check_out_folder, read_regular, results_folder, save_figure
from .engine_bench import FAST, FUSED, GRAPH, OPERATORS, PDL, recorded_bytes

CONTEXTS = (128, 2048, 4096)
PREFILLS = (128, 2048)
BEST = FAST + GRAPH + PDL
SYSTEMS = (BEST, FAST + GRAPH, FUSED + GRAPH, OPERATORS + GRAPH,
           "transformers eager", "transformers static + compile")


def run_size(size: str, out: str, budget_s: float, steps: int = 16, repeats: int = 2) -> int:
    """One size's bench in a process of its own; returns its exit status."""
    cmd = [sys.executable, "-m", "tritonllm_course.cli", "bench", "--config", size, "--out", out,
           "--contexts", *map(str, CONTEXTS), "--steps", str(steps), "--repeats", str(repeats),
           "--budget-s", str(budget_s), "--systems", *SYSTEMS]
    print(f"== {size}: {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    return subprocess.run(cmd).returncode


BENCH_KEYS = ("rows", "gpu", "date", "ceiling_gbps", "contexts")


def _bench(path: Path) -> dict:
    """A bench.json, or a ValueError naming the file: a run cut off mid-write or a stray file under --out gave a
    traceback from deep inside the table before."""
    try:   # a regular file only: a fifo blocked the read forever
        res = json.loads(read_regular(path))
    except (OSError, ValueError) as e:   # JSONDecodeError, UnicodeDecodeError and UnreadableFile are ValueErrors
        raise ValueError(f"{path}: not a readable bench record ({type(e).__name__}: {e})") from None
    missing = [k for k in BENCH_KEYS if not isinstance(res, dict) or k not in res]
    if missing or not isinstance(res["rows"], list) or not all(isinstance(r, dict) for r in res["rows"]):
        raise ValueError(f"{path}: not a bench record (missing or malformed: {', '.join(missing) or 'rows'})")
    if bad := _malformed(res):
        raise ValueError(f"{path}: not a bench record (malformed: {', '.join(bad)})")
    return res


def _positive(value, kind=(int, float)) -> bool:
    """A finite number above 0 of `kind` (JSON's true is no number, and NaN no timing)."""
    return isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _malformed(res: dict) -> list[str]:
    """The fields of a bench record that `collect`, the table and the plot read, each where it is not what `bench`
    writes: a ceiling of 0 was a ZeroDivisionError, a list of timings an AttributeError, both tracebacks."""
    def timings(ms) -> bool:      # {"128": 26.3, ...}: JSON's keys are strings, the contexts' digits
        return isinstance(ms, dict) and all(re.fullmatch(r"[0-9]+", c) and _positive(t) for c, t in ms.items())
    bad = [k for k in ("gpu", "date") if not isinstance(res[k], str)]
    bad += [] if _positive(res["ceiling_gbps"]) else ["ceiling_gbps"]
    bad += [] if isinstance(res["contexts"], list) and all(_positive(c, int) for c in res["contexts"]) \
        else ["contexts"]
    bad += [k for k in ("weight_and_state_bytes", "kv_bytes_per_token")
            if k in res and not (_positive(res[k]) or res[k] == 0)]
    for i, row in enumerate(res["rows"]):
        if not (isinstance(row.get("system"), str) and isinstance(row.get("error", ""), (str, type(None)))
                and timings(row.get("decode_ms")) and timings(row.get("ttft_ms", {}))
                and (row.get("kernels") is None or _positive(row["kernels"], int))):
            bad.append(f"rows[{i}]")
    return bad


def _folder(out: Path, size: str) -> Path | None:
    """The newest bench folder of `size` under `out` (any GPU, any date), or None."""
    named = "" if size == "qwen3.5-0.8b" else f"{size}_"
    found = sorted((p for p in out.glob(f"engine_{named}*") if (p / "bench.json").exists()
                    and _bench(p / "bench.json").get("config", "qwen3.5-0.8b") == size),
                   key=lambda p: p.name[-10:])
    return found[-1] if found else None


def collect(out: str | Path) -> dict:
    """The family's table from each size's newest bench: per size the bytes a decode token moves, the floor,
    each system's decode ms at every context (and % of the floor), prefill at PREFILLS."""
    out = Path(out)
    sizes = {}
    for size in FAMILY:
        folder = _folder(out, size)
        if folder is None:
            continue
        res = _bench(folder / "bench.json")
        rows = {r["system"]: r for r in res["rows"]}
        sizes[size] = {"folder": folder.name, "gpu": res["gpu"], "date": res["date"],
                       "ceiling_gbps": res["ceiling_gbps"],
                       "bytes": {c: recorded_bytes(res, c) for c in res["contexts"]},
                       "decode_ms": {name: {int(c): ms for c, ms in r["decode_ms"].items()}
                                     for name, r in rows.items()},
                       "ttft_ms": {name: {int(c): ms for c, ms in r.get("ttft_ms", {}).items()}
                                   for name, r in rows.items()},
                       "kernels": {name: r.get("kernels") for name, r in rows.items()},
                       "errors": {name: r["error"] for name, r in rows.items() if r["error"]}}
    return {"sizes": sizes}


TRITON = tuple(name for name in SYSTEMS if name.startswith("Triton"))


def _pct(s: dict, ms: float, c: int) -> float:
    """% of the bandwidth floor: the token's bytes at the copy bandwidth over the measured time."""
    return 100 * s["bytes"][c] / (ms * 1e-3) / 1e9 / s["ceiling_gbps"]


def best_triton(s: dict, c: int) -> tuple[str, float] | None:
    """(system, ms) of the fastest Triton system of a size at context c."""
    got = [(name, s["decode_ms"][name][c]) for name in TRITON if c in s["decode_ms"].get(name, {})]
    return min(got, key=lambda t: t[1]) if got else None


def markdown(family: dict) -> str:
    """Per size: the bytes and the floor, the fewest-kernels level with PDL and the fastest Triton level at
    128 and 4,096 cached tokens, transformers, the prompts' time to the first token, the kernels a token."""
    def cell(s, system, c):
        ms = s["decode_ms"].get(system, {}).get(c)
        return "-" if ms is None else f"{ms:.3f} ({_pct(s, ms, c):.0f}%)"

    def ttft(s, system):
        t = s["ttft_ms"].get(system, {})
        return " / ".join("-" if t.get(p) is None else f"{t[p]:.1f}" for p in PREFILLS)

    short = {BEST: "fast + PDL", FAST + GRAPH: "fast", FUSED + GRAPH: "fused",
             OPERATORS + GRAPH: "operators"}
    head = ["size", "GB a token @128", "floor @128 (ms)", "fast + PDL @128 (ms, % floor)", "fast + PDL @4096",
            "fastest Triton level @128", "transformers + compile @128", "transformers + compile @4096",
            "transformers eager @128", "prefill 128 / 2048 (ms): fast + PDL", "transformers eager",
            "kernels (fast)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for size, s in family["sizes"].items():
        best = best_triton(s, 128)
        fastest = "-" if best is None else f"{short[best[0]]} {best[1]:.3f} ({_pct(s, best[1], 128):.0f}%)"
        floor = s["bytes"][128] / (s["ceiling_gbps"] * 1e9) * 1e3
        cells = [size, f"{s['bytes'][128] / 1e9:.2f}", f"{floor:.3f}", cell(s, BEST, 128), cell(s, BEST, 4096),
                 fastest, cell(s, "transformers static + compile", 128), cell(s, "transformers static + compile", 4096),
                 cell(s, "transformers eager", 128), ttft(s, BEST), ttft(s, "transformers eager"),
                 str(s["kernels"].get(BEST) or "-")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(family: dict, path: Path | None = None):
    """Left: decode ms per token against the GB a token moves (128 cached tokens), each system a series, the
    floor the line bytes / copy bandwidth. Right: each system's % of that floor per size. Returns the
    matplotlib Figure (made without pyplot)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator
    fig = Figure(figsize=(13, 5))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    names, sizes = list(family["sizes"]), list(family["sizes"].values())
    if not sizes:
        return fig
    gb = [s["bytes"][128] / 1e9 for s in sizes]
    ceiling = sizes[0]["ceiling_gbps"]
    for system in SYSTEMS:
        have = [(g, s["decode_ms"][system][128], i) for i, (g, s) in enumerate(zip(gb, sizes))
                if 128 in s["decode_ms"].get(system, {})]
        if have:
            ax.plot([h[0] for h in have], [h[1] for h in have], marker="o", label=system)
            ax2.plot([names[h[2]].removeprefix("qwen3.5-") for h in have],
                     [_pct(sizes[h[2]], h[1], 128) for h in have], marker="o", label=system)
    xs = [min(gb) / 1.2, max(gb) * 1.2]
    ax.plot(xs, [x / ceiling * 1e3 for x in xs], "k--", lw=1, label=f"bandwidth floor ({ceiling:.0f} GB/s)")
    for g, name in zip(gb, names):
        ax.annotate(name.removeprefix("qwen3.5-"), (g, g / ceiling * 1e3), textcoords="offset points",
                    xytext=(4, -12), fontsize=8)
    ax.set(xscale="log", yscale="log", xlabel="GB a decode token moves (128 cached tokens, log)",
           ylabel="ms per token (log)")
    ax.set_xticks(gb, [f"{g:.1f}" for g in gb], minor=False)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.legend(fontsize=7)
    ax2.axhline(100, color="k", ls="--", lw=1)
    ax2.set(ylim=(0, 105), xlabel="size", ylabel="% of the bandwidth floor, 128 cached tokens")
    fig.suptitle(f"The dense Qwen3.5 family, batch 1, bf16, random weights: {sizes[0]['gpu']}, {sizes[0]['date']}")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path, dpi=120)
    return fig


def write(family: dict, out: str | Path) -> Path:
    """OUT/family_<gpu>_<date>.{json,md,png}, the GPU and the newest date of the benches it holds; returns
    the JSON's path (runs anywhere: the table of benches measured before)."""
    sizes = list(family["sizes"].values())
    if not sizes:
        raise ValueError(f"no bench of a family size under {out}: run `tritonllm-course bench --config ...`")
    gpu = sizes[0]["gpu"].lower().replace(" ", "-")
    stem = Path(out) / f"family_{gpu}_{max(s['date'] for s in sizes)}"
    results_folder(stem.parent)
    atomic_write_text(Path(f"{stem}.json"), json.dumps(family, indent=1))
    atomic_write_text(Path(f"{stem}.md"), markdown(family))
    plot(family, Path(f"{stem}.png"))
    return Path(f"{stem}.json")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results")
    p.add_argument("--sizes", nargs="+", choices=FAMILY, default=list(FAMILY))
    p.add_argument("--budget-s", type=float, default=240.0, help="each size's bench budget (default 240)")
    p.add_argument("--collect", action="store_true", help="only the table and plot of the benches under --out")
    args = p.parse_args(argv)
    if not args.budget_s > 0:                                                                   # NaN: refused
        print(f"family: error: --budget-s must be above 0, got {args.budget_s}", file=sys.stderr)
        return 2
    try:
        check_out_folder(args.out)                # before every size's bench, not after them
    except UnsafeWrite as e:
        print(f"family: error: {e}", file=sys.stderr)
        return 2
    status = 0
    if not args.collect:
        for size in args.sizes:
            t0 = time.perf_counter()
            status |= run_size(size, args.out, args.budget_s)
            print(f"== {size}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    try:
        family = collect(args.out)
    except (ValueError, KeyError, TypeError, AttributeError) as e:   # a bench.json that is not one: one line
        print(f"family: error: {e if isinstance(e, ValueError) else f'a bench record under {args.out}: {e!r}'}",
              file=sys.stderr)
        return 2
    if not family["sizes"]:   # an empty table, then a traceback from `write`: said in one line instead
        print(f"family: error: no bench of a family size under {args.out}: run `tritonllm-course bench --config "
              "...` (or this module without --collect) first", file=sys.stderr)
        return 2 if args.collect else status or 1   # without --collect: every size's bench failed
    print(markdown(family))
    print(f"written to {write(family, args.out)}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
