"""The measured table of every ready kernel at its real shapes: time, GB/s, % of the measured ceiling,
and the ratio to PyTorch eager (cuBLAS for the matmuls), torch.compile and torch.compile in max-autotune
mode. Each row names its strongest baseline, the fastest of those, and the ratio against it; a baseline that
fails at a shape is written as failed with its error. Writes JSON, a markdown table and a plot.

    python -m tritonllm_course.measure.kernel_table --out results/   # on a GPU machine
    python -m tritonllm_course.measure.kernel_table --out results/ --no-max-autotune   # minutes, not an hour
    python -m tritonllm_course.measure.kernel_table --out DIR --budget-s 480 --resume OLD.json   # in stretches

Inductor's max-autotune mode tunes its matmul templates and, by coordinate descent, the launch parameters of
its pointwise and reduction kernels too, so it is timed on every row. The files are written after every row:
`--budget-s` stops starting rows after that many seconds, and `--resume` takes the rows of an earlier JSON
(same GPU and max-autotune setting) and measures only the rest, so a GPU lent in short calls builds the table
over several.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..safe_files import atomic_write_text, read_regular, save_figure
from .benchmark import MAX_AUTOTUNE_LABEL, NOT_TRIED, BenchResult, bench, gpu_script, results_stem


def _ratio(r, impl: str, t: float) -> str:
    """`"1.23x"` against `impl`, "failed" where it failed at this shape, "not tried" where the slot rules it out
    there (`benchmark.max_autotune_refusal`), "-" where it was not timed."""
    if impl in r.times_us:
        return f"{r.times_us[impl] / t:.2f}x"
    if impl in r.failed:
        return NOT_TRIED if r.failed[impl].startswith(NOT_TRIED) else "failed"
    return "-"


def markdown(results, gpu: str, date: str) -> str:
    lines = [f"Measured on {gpu}, {date}, {results[0].dtype if results else ''}; ceiling = measured "
             f"device-to-device copy ({results[0].ceiling_gbps:.0f} GB/s)." if results else "",
             "",
             "| kernel | shape | triton us | GB/s | % of ceiling | vs eager | vs torch.compile | "
             "vs max-autotune | strongest baseline | vs strongest |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        t = r.times_us["triton"]
        shape = ", ".join(f"{k}={v}" for k, v in r.shape.items())
        strongest = r.strongest_baseline()
        lines.append(f"| {r.name} | {shape} | {t:.1f} | {r.gbps('triton'):.0f} | "
                     f"{100 * r.gbps('triton') / r.ceiling_gbps:.0f}% | {_ratio(r, 'torch eager', t)} | "
                     f"{_ratio(r, 'torch.compile', t)} | {_ratio(r, MAX_AUTOTUNE_LABEL, t)} | "
                     f"{strongest or '-'} | {_ratio(r, strongest, t) if strongest else '-'} |")
    failures = [(r, impl, why) for r in results for impl, why in r.failed.items()]
    if failures:
        lines += ["", "Baselines that failed or were not tried (not timed):", ""]
        lines += [f"- {r.name} {', '.join(f'{k}={v}' for k, v in r.shape.items())}: {impl}: {why}"
                  for r, impl, why in failures]
    return "\n".join(lines) + "\n"


def plot(results, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r.name} {','.join(str(v) for v in r.shape.values())}" for r in results]
    impls = ["triton", "torch eager", "torch.compile", MAX_AUTOTUNE_LABEL]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(results) + 1.5))
    h = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        ys = [i + j * h for i in range(len(results))]
        vals = [100 * r.gbps(impl) / r.ceiling_gbps if impl in r.times_us else 0 for r in results]
        ax.barh(ys, vals, height=h, label=impl)
    ax.set_yticks([i + h for i in range(len(results))], labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(100, color="k", lw=0.8)
    ax.set_xlabel("% of measured copy bandwidth")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def _resumed(path: str | None, gpu: str, max_autotune: bool) -> list[BenchResult]:
    """The rows of an earlier table to keep (`--resume`), or [] without one; one line and exit 2 when the file
    is not such a table or was measured on another GPU or with the other max-autotune setting."""
    if path is None:
        return []
    try:
        saved = json.loads(read_regular(path))   # a fifo refused by its type, never left to block the read
        rows = [BenchResult.from_dict(r) for r in saved["results"]]
        same = saved["gpu"] == gpu and saved["max_autotune"] == max_autotune
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --resume {path}: not a kernel table ({type(e).__name__}: {e})", file=sys.stderr)
        raise SystemExit(2) from None
    if not same:
        print(f"error: --resume {path}: measured on {saved['gpu']} with max_autotune={saved['max_autotune']}, "
              f"not on {gpu} with max_autotune={max_autotune}", file=sys.stderr)
        raise SystemExit(2)
    return rows


def _write(results, out: Path, tag: str, rt, date: str, max_autotune: bool, left: int) -> None:
    """The table so far: JSON, markdown and plot (`left`: rows not measured yet, 0 when complete)."""
    atomic_write_text(out / f"{tag}.json", json.dumps(
        {"gpu": rt.gpu_name, "date": date, "summary": rt.summary(), "max_autotune": max_autotune,
         "rows_left": left, "results": [r.as_dict() for r in results]}, indent=1))
    atomic_write_text(out / f"{tag}.md", markdown(results, rt.gpu_name, date))
    plot(results, out / f"{tag}.png", f"Decode-shape kernels on {rt.gpu_name}, {date}")


def _check_args(args) -> None:
    """--budget-s above 0 (NaN refused: it never ran out), and --slots naming ready slots, at least one: a name
    of none (a typo, a planned slot) measured nothing and wrote an empty table as complete."""
    if args.budget_s is not None and not args.budget_s > 0:
        raise ValueError(f"--budget-s must be > 0 seconds, got {args.budget_s}")
    if args.slots is not None:
        from .. import slots
        ready = {s.name for s in slots.all_slots() if s.ready}
        unknown = [name for name in args.slots if name not in ready]
        if unknown or not args.slots:
            raise ValueError(f"--slots {' '.join(unknown) if unknown else 'names no slot'}: each must be a ready "
                             "slot (`tritonllm-course progress` lists them)")


def main(argv=None) -> int:
    def add_args(ap):
        ap.add_argument("--slots", nargs="*", help="only these slots")
        ap.add_argument("--no-max-autotune", dest="max_autotune", action="store_false",
                        help="skip torch.compile in max-autotune mode (its autotuning takes most of the run)")
        ap.add_argument("--budget-s", type=float, default=None,
                        help="start no row after this many seconds (the files hold what was measured)")
        ap.add_argument("--resume", default=None, help="an earlier table's JSON: keep its rows, measure the rest")

    started = gpu_script(__doc__, argv, add_args=add_args, check=_check_args)
    if started is None:
        return 1
    args, rt = started
    from .. import slots
    results = _resumed(args.resume, rt.gpu_name, args.max_autotune)
    done = {(r.name, json.dumps(r.shape, sort_keys=True)) for r in results}
    todo = []
    for slot in slots.all_slots():
        if not slot.ready or (args.slots and slot.name not in args.slots):
            continue
        for index in slot.extra.get("bench", range(len(slot.shapes.get("real", [])))):
            shape = slot.shape(rt.preset, index)
            if (slot.name, json.dumps(shape, sort_keys=True)) not in done:
                todo.append((slot, shape))
    stem, date = results_stem(args.out, "kernels")
    out, tag = stem.parent, stem.name
    if not todo:            # every row resumed: the table is written once, complete
        _write(results, out, tag, rt, date, args.max_autotune, 0)
    t0 = time.time()
    for i, (slot, shape) in enumerate(todo):
        if args.budget_s is not None and time.time() - t0 > args.budget_s:
            print(f"--budget-s {args.budget_s:g} spent: {len(todo) - i} rows left; run again with --resume "
                  f"{out / tag}.json to measure them")
            break
        results.append(bench(slot.name, "solutions", shape=shape, max_autotune=args.max_autotune))
        _write(results, out, tag, rt, date, args.max_autotune, len(todo) - i - 1)
    print(markdown(results, rt.gpu_name, date))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
