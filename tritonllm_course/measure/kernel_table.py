"""The measured table of every ready kernel at its real shapes: time, GB/s, % of the measured ceiling,
and the ratio to PyTorch eager and torch.compile. Writes JSON, a markdown table and a plot.

    python -m tritonllm_course.measure.kernel_table --out results/   # on a GPU machine
"""
from __future__ import annotations

import json
from pathlib import Path

from ..safe_files import atomic_write_text, save_figure
from .benchmark import gpu_script, results_stem


def markdown(results, gpu: str, date: str) -> str:
    lines = [f"Measured on {gpu}, {date}, {results[0].dtype if results else ''}; ceiling = measured "
             f"device-to-device copy ({results[0].ceiling_gbps:.0f} GB/s)." if results else "",
             "",
             "| kernel | shape | triton us | GB/s | % of ceiling | vs eager | vs torch.compile |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        t = r.times_us["triton"]
        shape = ", ".join(f"{k}={v}" for k, v in r.shape.items())
        comp = r.times_us.get("torch.compile")
        lines.append(f"| {r.name} | {shape} | {t:.1f} | {r.gbps('triton'):.0f} | "
                     f"{100 * r.gbps('triton') / r.ceiling_gbps:.0f}% | {r.times_us['torch eager'] / t:.2f}x | "
                     + (f"{comp / t:.2f}x |" if comp else "- |"))
    return "\n".join(lines) + "\n"


def plot(results, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r.name} {','.join(str(v) for v in r.shape.values())}" for r in results]
    impls = ["triton", "torch eager", "torch.compile"]
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


def main(argv=None) -> int:
    started = gpu_script(__doc__, argv,
                         add_args=lambda ap: ap.add_argument("--slots", nargs="*", help="only these slots"))
    if started is None:
        return 1
    args, rt = started
    from .. import slots
    from .benchmark import bench
    results = []
    for slot in slots.all_slots():
        if not slot.ready or (args.slots and slot.name not in args.slots):
            continue
        for index in slot.extra.get("bench", range(len(slot.shapes.get("real", [])))):
            results.append(bench(slot.name, "solutions", shape=slot.shape(rt.preset, index)))
    stem, date = results_stem(args.out, "kernels")
    out, tag = stem.parent, stem.name
    atomic_write_text(out / f"{tag}.json", json.dumps(
        {"gpu": rt.gpu_name, "date": date, "summary": rt.summary(),
         "results": [r.as_dict() for r in results]}, indent=1))
    atomic_write_text(out / f"{tag}.md", markdown(results, rt.gpu_name, date))
    plot(results, out / f"{tag}.png", f"Decode-shape kernels on {rt.gpu_name}, {date}")
    print(markdown(results, rt.gpu_name, date))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
