"""The ladder's results: one dict per run (`result`), its table (`markdown`), its plot (`plot`), the files
(`write`: ladder_<gpu>_<date>.{json,md,png}) and the newest such file of a folder (`newest`).

Each step's speed-ups are read against the step before it (the last one measured), never against the naive
start alone, and against the bandwidth floor: the bytes a decode token must move (`measure.bytes_model`)
at the measured copy bandwidth. A prompt must read the same weights at least once: its floor is the same
bytes (a bound, not a target: a 128-token prompt is also 2 x 128 FLOPs per weight).
"""
from __future__ import annotations

import datetime
import json
import platform
from pathlib import Path

import torch

from ..config import Qwen35Config
from ..safe_files import atomic_write_text, results_folder, save_figure

NAME = "ladder"


def result(rows, config: Qwen35Config, *, config_name: str, dtype: torch.dtype, device, prompt_len: int,
           tokens: int, uncached_tokens: int, repeats: int, check: dict | None, seconds: float) -> dict:
    """The run as a dict: its set-up, the floors (on a GPU), and a row per step (`rungs.Row`)."""
    import triton
    from ..measure.bytes_model import bytes_per_token
    from .rungs import rows_as_dicts
    device = torch.device(device)
    on_gpu = device.type == "cuda"
    per_token = bytes_per_token(config, prompt_len, dtype)
    out = {"gpu": torch.cuda.get_device_name(device) if on_gpu else f"CPU ({platform.machine()}), Triton interpreter",
           "date": datetime.date.today().isoformat(), "config": config_name, "dtype": str(dtype).replace("torch.", ""),
           "versions": f"torch {torch.__version__}, triton {triton.__version__}", "prompt_len": prompt_len,
           "tokens": tokens, "uncached_tokens": uncached_tokens, "repeats": repeats, "bytes_per_token": per_token,
           "ceiling_gbps": None, "floor_ms": None, "check": check, "seconds": seconds, "steps": rows_as_dicts(rows)}
    if on_gpu:
        from ..measure.benchmark import ceiling_gbps
        out["ceiling_gbps"] = ceiling_gbps()
        out["floor_ms"] = per_token / (out["ceiling_gbps"] * 1e9) * 1e3
    return out


def speedups(res: dict) -> list[dict]:
    """Each step's row with `prefill_x` / `decode_x` (the step before it, measured, over this one) and
    `decode_floor_x` / `prefill_floor_x` (this one over the floor), None where there is nothing to divide."""
    out, before = [], {"prefill_ms": None, "decode_ms": None}
    floor = res.get("floor_ms")
    for row in res["steps"]:
        row = dict(row)
        for kind in ("prefill", "decode"):
            ms = row[f"{kind}_ms"]
            row[f"{kind}_x"] = before[f"{kind}_ms"] / ms if ms and before[f"{kind}_ms"] else None
            row[f"{kind}_floor_x"] = ms / floor if ms and floor else None
            if ms:
                before[f"{kind}_ms"] = ms
        out.append(row)
    return out


def totals(res: dict) -> dict:
    """First measured step over last, prefill and decode: the product of the step-by-step speed-ups."""
    measured = [r for r in res["steps"] if r["decode_ms"]]
    if len(measured) < 2:
        return {}
    first, last = measured[0], measured[-1]
    return {"from": first["key"], "to": last["key"], "prefill_x": first["prefill_ms"] / last["prefill_ms"],
            "decode_x": first["decode_ms"] / last["decode_ms"]}


def _fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def _ms(x) -> str:
    """Milliseconds at three significant figures or more."""
    return "-" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def markdown(res: dict) -> str:
    floor = res.get("floor_ms")
    lines = [f"# The ladder: {res['config']} on {res['gpu']}, {res['date']}", "",
             f"{res['dtype']}, batch 1, greedy, random weights; {res['versions']}. Prefill: a "
             f"{res['prompt_len']}-token prompt, time to the first token. Decode: mean time per token after the "
             f"prompt: a step with a KV cache makes {res['tokens']} tokens a run, {res['repeats']} runs, medians "
             f"(the engine's stream runs a step ahead: its last token is left out); a step without one makes "
             f"{res['uncached_tokens']} tokens in one run, each of its decode steps running the whole sequence "
             "again. x: speed-up against the step before."]
    if floor:
        lines[-1] += (f" Floor: the {res['bytes_per_token']:,} bytes a decode token moves at the measured copy "
                      f"bandwidth of {res['ceiling_gbps']:.0f} GB/s, {floor:.3f} ms (a prompt reads the same weights "
                      "at least once: the same floor); x floor = time / floor.")
    check = res.get("check")
    lines[-1] += (f" Tokens: each step's {check['tokens']} greedy tokens after a prompt of {check['prompt_len']} "
                  f"tokens against the reference model's, {check['dtype']}, {check['weights']}." if check else
                  " Tokens: not checked in this run.")
    lines += ["", "| # | step | what changes | prefill (ms) | x | decode (ms/token) | x | x floor | timed: prompts / "
              "decode steps | kernel calls / token | tokens |", "|---" * 11 + "|"]
    for i, r in enumerate(speedups(res)):
        tokens = ("-" if r["identical"] is None else "identical" if r["identical"] else "DIFFERENT"
                  if not r.get("check_error") else r["check_error"])
        if r["error"]:
            lines.append(f"| {i} | {r['label']} | {r['change']} | - | - | - | - | - | - | - | {r['error']} |")
            continue
        lines.append(f"| {i} | {r['label']} | {r['change']} | {_ms(r['prefill_ms'])} | {_fmt(r['prefill_x'], '.2f')} "
                     f"| {_ms(r['decode_ms'])} | {_fmt(r['decode_x'], '.2f')} | {_fmt(r['decode_floor_x'], '.1f')} "
                     f"| {r['prefill_runs']} / {r['decode_tokens']} | {_fmt(r['calls_per_token'], '.0f')} | {tokens} |")
    total = totals(res)
    if total:
        lines += ["", f"From `{total['from']}` to `{total['to']}`: prefill {total['prefill_x']:.0f}x, decode "
                      f"{total['decode_x']:.0f}x, the product of the steps' speed-ups."]
    setup = [f"{r['key']} {r['setup_s']:.0f} s" for r in res["steps"] if r.get("setup_s") is not None]
    lines += ["", f"Set-up per step (build, compile, capture): {', '.join(setup)}. The whole run: "
                  f"{res['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: str | Path | None = None):
    """Decode and prefill time per step on log axes, each point labelled with its speed-up against the step
    before, the floor as a dashed line. Returns the matplotlib Figure (made without pyplot)."""
    from matplotlib.figure import Figure
    rows = [r for r in speedups(res) if r["decode_ms"]]
    floor = res.get("floor_ms")
    fig = Figure(figsize=(13, 5))
    axes = fig.subplots(1, 2)
    xs = range(len(rows))
    for ax, kind, title in ((axes[0], "decode", "decode, ms per token"),
                            (axes[1], "prefill", f"prefill of {res['prompt_len']} tokens, ms")):
        ms = [r[f"{kind}_ms"] for r in rows]
        ax.plot(xs, ms, marker="o", color="tab:blue")
        for x, r in zip(xs, rows):
            speed = r[f"{kind}_x"]
            if speed:
                ax.annotate(f"{speed:.2g}x", (x, r[f"{kind}_ms"]), textcoords="offset points", xytext=(4, 6),
                            fontsize=8)
        if floor:
            ax.axhline(floor, color="k", ls="--", lw=0.8, label=f"bandwidth floor {floor:.3f} ms")
            ax.legend(fontsize=8, loc="upper right")
        ax.set_yscale("log")
        ax.set_xticks(list(xs), [r["label"] for r in rows], rotation=40, ha="right", fontsize=8)
        ax.set_title(title + " (labels: speed-up against the step before)", fontsize=10)
        ax.grid(True, which="both", axis="y", alpha=0.3)
    fig.suptitle(f"The ladder: {res['config']} on {res['gpu']}, {res['date']} ({res['dtype']}, batch 1)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def write(res: dict, stem: str | Path) -> list[Path]:
    """stem.json, stem.md and stem.png (once a step is measured)."""
    stem = Path(stem)
    results_folder(stem.parent)
    paths = [stem.with_suffix(".json"), stem.with_suffix(".md")]
    atomic_write_text(paths[0], json.dumps(res, indent=1))
    atomic_write_text(paths[1], markdown(res))
    if any(r["decode_ms"] for r in res["steps"]):
        save_figure(plot(res), stem.with_suffix(".png"), dpi=120)
        paths.append(stem.with_suffix(".png"))
    return paths


def newest(folder: str | Path = "results") -> Path | None:
    """The newest ladder_<gpu>_<date>.json of `folder` (by date, then name), or None."""
    found = sorted(Path(folder).glob(f"{NAME}_*.json"), key=lambda p: (p.stem.rsplit("_", 1)[-1], p.name))
    return found[-1] if found else None


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
