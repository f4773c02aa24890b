"""`tritonllm-course`: the course's command line.

  progress              every kernel slot: planned or ready, your exercise filled in?, does it pass?
  check SLOT            check your kernel for one slot and print the report
  make-exercises        regenerate exercises/ from solutions/ (--check: only report drift)
  student-copy DEST     a copy of the course without solutions/ (for handing out)
  sync-notebooks        write the standard first cell into every notebook and strip outputs
  colab-links           the "Open in Colab" address of every chapter (needs REPO_URL in colab.py)
  generate ...          run the model (see `generate --help`)
  bench ...             the benchmark table on a GPU (see `bench --help`)
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from . import kernels, regions


def _setup():
    from .runtime import setup
    return setup(quiet=True)


def cmd_progress(args) -> int:
    rt = _setup()
    from . import slots
    from .checking import check
    print(rt.summary())
    print(f"{'slot':<24}{'op':>4}  {'chapter':<24}{'status':<9}{'exercise':<12}check")
    order = {s.name: i for i, s in enumerate(slots.all_slots())}
    base = lambda s: order.get(s.name.split(".")[0], order[s.name])  # noqa: E731  (variants by their slot)
    for slot in sorted(slots.all_slots(), key=lambda s: (s.chapter, base(s), s.name)):
        op = str(slot.op) if slot.op else ""
        if not slot.ready:
            print(f"{slot.name:<24}{op:>4}  {slot.chapter:<24}{'planned':<9}")
            continue
        filled, _ = kernels.exercise_status(slot.family, slot.function)
        verdict = ""
        if filled and args.run:
            verdict = "pass" if check(slot.name, "exercises", trials=1, verbose=False).passed else "FAIL"
        print(f"{slot.name:<24}{op:>4}  {slot.chapter:<24}{'ready':<9}{'filled' if filled else 'to do':<12}"
              f"{verdict}")
    return 0


def cmd_check(args) -> int:
    _setup()
    from .checking import check
    report = check(args.slot, args.source, trials=args.trials)
    return 0 if report.passed else 1


def exercise_files() -> dict[Path, str]:
    """{exercise path: the text it should have} for every solution module."""
    root = kernels.course_root()
    return {root / "exercises" / p.name: regions.make_exercise(p.read_text(), p.stem)
            for p in sorted((root / "solutions").glob("*.py")) if p.name != "__init__.py"}


def drifted() -> list[str]:
    """Exercises that differ from their solution outside the regions (or are missing)."""
    problems = []
    root = kernels.course_root()
    for path, expected in exercise_files().items():
        if not path.exists():
            problems.append(f"{path.relative_to(root)} is missing")
        elif regions.mask(path.read_text(), str(path)) != regions.mask(expected):
            problems.append(f"{path.relative_to(root)} differs from solutions/{path.name} outside the "
                            "exercise regions: run `tritonllm-course make-exercises`")
    return problems


def cmd_make_exercises(args) -> int:
    if args.check:
        problems = drifted()
        print("\n".join(problems) or "exercises/ matches solutions/")
        return 1 if problems else 0
    for path, text in exercise_files().items():
        if path.exists() and regions.mask(path.read_text()) == regions.mask(text) and not args.force:
            continue  # same outside the regions: keep the learner's work
        path.write_text(text)
        print(f"wrote {path.relative_to(kernels.course_root())}")
    return 0


def cmd_student_copy(args) -> int:
    root, dest = kernels.course_root(), Path(args.dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        print(f"{dest} exists and is not empty", file=sys.stderr)
        return 1
    ignore = shutil.ignore_patterns("solutions", ".git", ".venv", "__pycache__", "*.egg-info",
                                    ".pytest_cache", ".ipynb_checkpoints", ".whl")
    shutil.copytree(root, dest, ignore=ignore, dirs_exist_ok=True)
    for path, text in exercise_files().items():   # fresh, unfilled exercises
        (dest / "exercises" / path.name).write_text(text)
    print(f"student copy written to {dest} (no solutions/; every exercise unfilled)")
    return 0


def cmd_sync_notebooks(args) -> int:
    from .notebooks_tools import sync_all
    for path in sync_all():
        print(f"synced {path.relative_to(kernels.course_root())}")
    return 0


def cmd_colab_links(args) -> int:
    from .colab import colab_url
    from .notebooks_tools import notebooks
    try:
        for path in notebooks():
            print(f"{path.name}: {colab_url(path.name, args.repo_url)}")
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tritonllm-course", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("progress", help="every slot with its status")
    p.add_argument("--no-run", dest="run", action="store_false", help="do not run the checks")
    p.set_defaults(func=cmd_progress)
    p = sub.add_parser("check", help="check your kernel for one slot")
    p.add_argument("slot")
    p.add_argument("--source", choices=kernels.SOURCES, default=None)
    p.add_argument("--trials", type=int, default=2)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("make-exercises", help="regenerate exercises/ from solutions/")
    p.add_argument("--check", action="store_true", help="only report exercises that drifted")
    p.add_argument("--force", action="store_true", help="overwrite filled-in exercises too")
    p.set_defaults(func=cmd_make_exercises)
    p = sub.add_parser("student-copy", help="copy the course without solutions/")
    p.add_argument("dest")
    p.set_defaults(func=cmd_student_copy)
    p = sub.add_parser("sync-notebooks", help="standard first cell, no outputs, in every notebook")
    p.set_defaults(func=cmd_sync_notebooks)
    p = sub.add_parser("colab-links", help="the Open-in-Colab address of every chapter")
    p.add_argument("--repo-url", default=None, help="instead of colab.REPO_URL")
    p.set_defaults(func=cmd_colab_links)
    try:
        from .generation import add_generate_parser, run_generate
    except ImportError:
        pass
    else:
        add_generate_parser(sub).set_defaults(func=run_generate)
    try:
        from .engine.bench import add_bench_parser, run_bench
    except ImportError:
        pass
    else:
        add_bench_parser(sub).set_defaults(func=run_bench)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
