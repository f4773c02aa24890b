"""The GPU verification in parts that each fit one call of a lent GPU (10 minutes a command, 30 a session).

`quick` (5 minutes or less on an H200) is the first GPU run after any change to a kernel: every ready slot
once at one real shape in bf16 and fp16 (tests/kernels/test_gpu_quick.py), the engine's tokens at every level against
the reference model, PDL against pdl=False bit for bit, fp16's residual stream, and three chapters.
The other parts together run every GPU test and every chapter; each names its pytest workers and the time
limit it runs under (scripts/gpu_check.sh stops a part at its limit: a hung test fails its part, never the call).
Test files that check host-side logic only (file tools, styles, exercise regions, planted-bug tables read as
text, cross-compilation) are HOST_ONLY: the CPU suite runs them, a GPU adds nothing to them.
Budgets are from the measured durations of 2026-12-04 (H200, 12 workers: the tests 10x<!-- unsaved: 2026-12-04 -->
faster than one worker, the chapters 8x<!-- unsaved: 2026-12-04 -->); tests/measure/test_gpu_parts.py checks that
every test file and chapter belongs somewhere.

    python3 scripts/gpu_parts.py --list                      the parts, their workers and limits
    python3 scripts/gpu_parts.py args PART                   the pytest arguments of a part, one a line
    python3 scripts/gpu_parts.py record PART DURATIONS RC SECONDS OUT.json   a part's record (gpu_check.sh)
    python3 scripts/gpu_parts.py readme [--write]            the README's line, from results/gpu_check/
    python3 scripts/gpu_parts.py fit PART LEFT_S [TAG]         the limit PART runs under with LEFT_S seconds
                                                             of a call left (exit 1 and why where it does not fit)
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "results" / "gpu_check"


@dataclass(frozen=True)
class Part:
    what: str
    workers: int
    limit_s: int                                       # gpu_check.sh stops the part here
    tests: tuple[str, ...] = ()                        # files, or file::-k expression as "file -k expr"
    notebooks: tuple[str, ...] = ()                    # chapters (paths under notebooks/), "*" for all
    marker: str = "not timing and not alone"
    env: dict = field(default_factory=dict)


# test files by their path under tests/, less .py (tests/<topic>/<file>.py: the folders of CONTRIBUTING.md)
KERNEL_TESTS = (
    "kernels/test_slots", "kernels/test_attention", "kernels/test_autotune", "kernels/test_conv1d",
    "kernels/test_delta_rule", "kernels/test_deltanet_gates", "kernels/test_embedding", "kernels/test_flash_attention",
    "kernels/test_flash_decoding", "kernels/test_gated_rmsnorm", "kernels/test_gemm_epilogue", "model/test_hf_rounding",
    "kernels/test_kv_cache", "kernels/test_layer_fusion", "kernels/test_linear", "kernels/test_lowering",
    "kernels/test_norm_fusion", "kernels/test_quant", "kernels/test_reference_ops", "kernels/test_residual",
    "kernels/test_rmsnorm", "kernels/test_rope", "kernels/test_sampling", "kernels/test_splitk", "kernels/test_swiglu",
    "kernels/test_tma_gemm", "model/test_fp16_residual",
)
MODEL_TESTS = (
    "model/test_engine", "model/test_engine_levels", "model/test_engine_weights", "model/test_pdl",
    "measure/test_ladder", "model/test_family_gpu", "measure/test_family_bench", "model/test_generate_cli",
    "model/test_reference_model", "model/test_weights", "model/test_swap", "measure/test_profiling",
    "measure/test_layer_times", "tools/test_bad_inputs", "tools/test_foundation", "measure/test_eager_profile",
    "tools/test_bad_inputs_api", "tools/test_bad_inputs_cli",
)
# checked on the CPU only: what they test does not run on the GPU
HOST_ONLY = (
    "tools/test_student_copy", "tools/test_student_branch", "tools/test_student_leaks", "tools/test_exercise_files",
    "tools/test_safe_files", "tools/test_style", "tools/test_regions", "tools/test_notebook_metadata",
    "tools/test_kernel_sources", "lab/test_lab", "model/test_configs", "model/test_family_configs",
    "kernels/test_memcheck", "lab/test_deltanet_head_fusion_probe", "measure/test_figures",
    "planted/test_check_robustness", "kernels/test_targets", "measure/test_gpu_parts", "tools/test_house",
    "tools/test_chapter_slugs", "measure/test_weights_bench", "measure/test_kernel_table",
    "tools/test_chapter_kernels",
)
QUICK_CHAPTERS = ("04_rmsnorm.ipynb", "08_attention.ipynb", "19_engine.ipynb")


def _files(names) -> tuple[str, ...]:
    return tuple(f"tests/{n}.py" for n in names)


PARTS: dict[str, Part] = {
    "quick": Part("every slot once at a real shape in bf16 and fp16, the engine's tokens at every level, PDL bit "
                  "for bit, fp16's residual stream, the TMA prompt GEMMs, chapters "
                  + ", ".join(c.removesuffix(".ipynb") for c in QUICK_CHAPTERS),
                  workers=12, limit_s=300,
                  tests=("tests/kernels/test_gpu_quick.py",
                         "tests/model/test_engine_levels.py -k every_level_gives or graph_replay",
                         "tests/model/test_pdl.py -k same_tokens_with_pdl or same_bits_with_pdl",
                         "tests/model/test_fp16_residual.py", "tests/kernels/test_tma_gemm.py"),
                  notebooks=QUICK_CHAPTERS),
    "kernels": Part("every kernel family's tests at the real shapes, every slot's full check in bf16 and fp16",
                    workers=12, limit_s=480, tests=_files(KERNEL_TESTS)),
    # 16 workers: a GPU machine's 16 cores compile the planted copies. Its slowest tests compare 32,768-row caches,
    # which `checking.compare` does on the GPU (on the host they held the part near its limit); the part's latest
    # time is in results/gpu_check/planted.json
    "planted": Part("the planted bugs: the learner's check fails each one at the real shapes",
                    workers=16, limit_s=480, tests=("tests/planted/test_planted_bugs.py",)),
    "model": Part("the model, the engine at every level, PDL, the ladder, the family, the command line",
                  workers=12, limit_s=480, tests=_files(MODEL_TESTS)),
    "chapters": Part("every chapter under nbval, and the chapters with widgets moved as a learner would",
                     workers=12, limit_s=480, tests=("tests/tools/test_widgets.py",), notebooks=("*",)),
    # `alone`: the family's widest sizes, whose fp32 copies outgrow an 80 GB GPU's share among 12 workers
    # (qwen3.5-27b ran out of memory so on an H100, 2026-12-05)
    "timing": Part("the tests that assert a GPU timing, and those that need the GPU's memory to themselves, one "
                   "at a time", workers=1, limit_s=480, tests=("tests",), marker="timing or alone"),
}
FULL = ("kernels", "planted", "model", "chapters", "timing")


def pytest_args(name: str) -> list[str]:
    """One argument a line for gpu_check.sh: the files and chapters, then `-m`, and `-k` where a file of the
    part is filtered (pytest takes one `-k` for the whole run: each file's filter is joined in, tied to it)."""
    part = PARTS[name]
    paths, filtered = [], []
    for entry in part.tests:
        path, _, expr = entry.partition(" -k ")
        paths.append(path)
        if expr:
            filtered.append((Path(path).stem, expr))
    chapters = [f"notebooks/{c}" for c in part.notebooks if c != "*"] + (["notebooks"] if "*" in part.notebooks
                                                                         else [])
    args = paths + chapters + ["-m", part.marker]
    if filtered:
        # a file's expression applies to that file's tests (its name is a keyword of each); the other files whole
        keep = [f"({stem} and ({expr}))" for stem, expr in filtered]
        keep.append("not (" + " or ".join(stem for stem, _ in filtered) + ")")
        args += ["-k", " or ".join(keep)]
    if part.notebooks:
        args += ["--nbval-lax", "--nbval-cell-timeout=300"]
    return args


def counts(durations: Path) -> dict:
    """passed / failed / skipped from the per-test log that tritonllm_course.pytest_faillog writes."""
    out = {"passed": 0, "failed": 0, "skipped": 0}
    if durations.is_file():
        for line in durations.read_text().splitlines():
            fields = line.split("\t")
            if len(fields) == 3 and fields[1] in out:
                out[fields[1]] += 1
    return out


def record(name: str, durations: Path, rc: int, seconds: float) -> dict:
    """A part's record; passed_all only where pytest exited 0 with at least one test passed and none failed (a
    run that collected nothing, or whose tests all skipped, exits 0 too and checked nothing)."""
    import platform
    counted = counts(durations)
    rec = {"part": name, "commit": os.environ.get("COMMIT", "unknown"), "date": _today(), "rc": rc,
           "passed_all": rc == 0 and counted["passed"] > 0 and counted["failed"] == 0, "seconds": round(seconds),
           # the limit and workers gpu_check.sh ran the part under
           "limit_s": int(os.environ.get("LIMIT_S") or PARTS[name].limit_s),
           "workers": int(os.environ.get("JOBS") or PARTS[name].workers),
           "dtype": os.environ.get("TRITONLLM_DTYPE", "bfloat16"),
           **counted, "python": platform.python_version()}
    try:
        import torch
        import triton
        rec.update(gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                   torch=torch.__version__, triton=triton.__version__)
    except ImportError:
        rec.update(gpu=None)
    return rec


def _today() -> str:
    import datetime
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def records() -> dict[str, dict]:
    """The last recorded pass of each part, results/gpu_check/<part>[_<dtype>].json."""
    out = {}
    for path in sorted(RECORDS.glob("*.json")):
        rec = json.loads(path.read_text())
        out[path.stem] = rec
    return out


# seconds kept back from a call's time for a part's record and the packing of its logs
RECORD_S = 20


def fit(name: str, left_s: float, tag: str | None = None) -> tuple[int | None, str]:
    """(the time limit part `name` runs under with `left_s` seconds of a lent GPU's call left, why), the limit
    None where it does not fit. A part runs if what is left, less RECORD_S, is at least half again its last
    recorded pass (results/gpu_check/<tag>.json, tag = name or name_<dtype>) plus half a minute for the
    workers to start, or its whole limit where it has none; it then runs under the smaller of its limit and
    what is left, so that several parts in one call stop before the call does."""
    part = PARTS[name]
    rec = records().get(tag or name)
    room = int(left_s) - RECORD_S
    if rec is not None and rec.get("passed_all"):
        need, since = min(part.limit_s, int(rec["seconds"] * 1.5) + 30), f"its last pass took {rec['seconds']} s"
    else:
        need, since = part.limit_s, "no recorded pass"
    if room < need:
        return None, f"{room} s left, {name} needs {need} s ({since})"
    return min(part.limit_s, room), since


def readme_line() -> str:
    """What the README says of the GPU verification, computed from the records (tests/measure/test_gpu_parts.py):
    quick and the full suite in bf16, then every part that passed in fp16 (`<part>_float16.json`), with its date."""
    recs = records()
    quick = {}                                  # (gpu, date, commit) -> the dtypes quick passed in, fp16 aside
    for r in recs.values():
        if r["part"] == "quick" and r["passed_all"] and r["dtype"] != "float16":
            quick.setdefault((r["gpu"], r["date"], r["commit"]), []).append(r["dtype"])
    quick_text = "; ".join(f"passed on {gpu} in {' and '.join(sorted(dtypes))}, {date} (commit {commit})"
                           for (gpu, date, commit), dtypes in sorted(quick.items())) or "not run"
    full = [recs[p] for p in FULL if p in recs and recs[p]["passed_all"]]          # the full suite in bf16
    by_run = {}                                 # (gpu, date) -> "part N" for the parts that passed there
    for r in full:
        by_run.setdefault((r["gpu"], r["date"]), []).append(f"{r['part']} {r['passed']}")
    done = "; ".join(f"{', '.join(parts)} tests passed on {gpu} ({date})"
                     for (gpu, date), parts in sorted(by_run.items()))
    done = done or "none yet"
    missing = [p for p in FULL if p not in recs or not recs[p]["passed_all"]]
    text = f"GPU checks (`scripts/gpu_check.sh`, records in results/gpu_check/): quick {quick_text}; "
    text += f"full suite in bfloat16: {done}"
    if missing:
        text += f" (to run: {', '.join(missing)})"
    half = {}                                   # (gpu, date) -> the parts passed in fp16, in the parts' order
    for p in ("quick", *FULL):
        r = recs.get(f"{p}_float16")
        if r is not None and r["passed_all"]:
            half.setdefault((r["gpu"], r["date"]), []).append(p)
    for (gpu, date), parts in sorted(half.items()):
        text += f"; in float16 on {gpu} ({date}): {', '.join(parts)}"
    return text + "."


def write_readme() -> None:
    """Put `readme_line()` in the README in place of the sentence it replaces (from "GPU checks (" to the end
    of its paragraph), the paragraph re-wrapped at 115 characters."""
    import textwrap
    readme = ROOT / "README.md"
    text = readme.read_text()
    found = re.search(r"GPU checks\s+\(`scripts/gpu_check\.sh`", text)     # wrapped anywhere by the last write
    if found is None:
        raise SystemExit("README.md has no sentence starting \"GPU checks (`scripts/gpu_check.sh`\" to replace")
    start = found.start()
    end = text.index("\n\n", start)
    para = text.rindex("\n\n", 0, start) + 2
    body = text[para:start].replace("\n", " ") + readme_line()
    readme.write_text(text[:para] + textwrap.fill(body, 115, break_on_hyphens=False, break_long_words=False)
                      + text[end:])


def _is_record(path: Path) -> bool:
    """Whether `path` holds what `record` writes (a JSON object naming its part), to be replaced by a new one."""
    try:
        return isinstance(rec := json.loads(path.read_bytes()), dict) and "part" in rec
    except (OSError, ValueError, RecursionError):
        return False


def _write_record(name: str, durations: str, rc: str, seconds: str, out: str) -> int:
    """`record`'s command: its arguments checked before anything is written (gpu_check.sh makes the durations
    file before the part runs, so a missing one is a wrong path, never a part that ran nothing)."""
    sys.path.append(str(ROOT))              # the course's safe writes, also where it is not installed
    from tritonllm_course.safe_files import UnsafeWrite, atomic_write_text
    error = None
    if not Path(durations).is_file():
        error = f"DURATIONS {durations} is not a file (the part's durations-<part>.tsv)"
    elif not re.fullmatch(r"[0-9]+", rc):
        error = f"RC must be pytest's exit status, a whole number, got {rc!r}"
    elif not re.fullmatch(r"[0-9]+(\.[0-9]+)?", seconds):
        error = f"SECONDS must be a number of seconds, got {seconds!r}"
    elif Path(out).is_file() and not _is_record(Path(out)):   # gpu_check.sh's OUTDIR is new: never the user's
        error = f"OUT.json: {out} exists and is not a part's record: not overwritten"
    if error is None:
        rec = record(name, Path(durations), int(rc), float(seconds))
        try:
            atomic_write_text(out, json.dumps(rec, indent=1) + "\n")
        except UnsafeWrite as e:
            error = f"OUT.json: {e}"
    if error is not None:
        print(f"gpu_parts.py record: {error}", file=sys.stderr)
        return 2
    print(json.dumps(rec))
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "--list":
        for name, part in PARTS.items():
            print(f"{name:9} {part.workers:2} workers, stopped at {part.limit_s} s: {part.what}")
        return 0
    if cmd in ("args", "workers", "limit") and (len(rest) != 1 or rest[0] not in PARTS):
        print(f"gpu_parts.py {cmd}: name one part of {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if cmd == "args":
        print("\n".join(pytest_args(rest[0])))
    elif cmd == "workers":
        print(PARTS[rest[0]].workers)
    elif cmd == "limit":
        print(PARTS[rest[0]].limit_s)
    elif cmd == "record" and len(rest) == 5 and rest[0] in PARTS:
        return _write_record(*rest)
    elif cmd == "fit" and len(rest) in (2, 3) and rest[0] in PARTS and rest[1].isdigit():
        limit, why = fit(rest[0], int(rest[1]), rest[2] if len(rest) == 3 else None)
        print(limit if limit is not None else why)
        return 0 if limit is not None else 1
    elif cmd == "readme" and rest in ([], ["--write"]):
        if rest:
            write_readme()
        print(readme_line())
    else:
        print(f"gpu_parts.py: unknown command {' '.join(argv)!r} (--help lists them)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
