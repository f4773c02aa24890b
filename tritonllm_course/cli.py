"""`tritonllm-course`: the course's command line.

  progress              every kernel slot: planned or ready, your exercise filled in?, does it pass?
  check SLOT            check your kernel for one slot and print the report
  make-exercises        bring exercises/ in step with solutions/, keeping your code (--check: report drift)
  student-copy DEST     a copy of the course without solutions/ (for handing out)
  student-branch        the same as one new commit on a git branch (default `student`) learners pull
  sync-notebooks        write the standard first cell into every notebook and strip outputs
  colab-links           the "Open in Colab" address of every chapter (needs REPO_URL in colab.py)
  generate ...          run the model (see `generate --help`)
  bench ...             the benchmark table on a GPU (see `bench --help`)
  layers ...            the engine per layer and per kind of layer on a GPU (see `layers --help`)
  targets ...           every kernel compiled for sm_75 to sm_90 (no GPU needed), checked against each GPU's limits
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__, exercise_files, kernels, regions, student_version
from .exercise_files import drifted  # noqa: F401  (`cli.drifted()`: what the tests call)
from .runtime import (DTYPE_NAMES, NO_COURSE, SetupError, course_folder, course_root_error, interpreter_unless_gpu,
                      setup)


def _setup():
    return setup(quiet=True)


def cmd_progress(args) -> int:
    rt = _setup()
    from . import slots
    from .checking import check
    print(rt.summary())
    print(f"{'slot':<28}{'op':>4}  {'chapter':<24}{'status':<9}{'exercise':<12}check")
    order = {s.name: i for i, s in enumerate(slots.all_slots())}
    base = lambda s: order.get(s.name.split(".")[0], order[s.name])  # noqa: E731  (variants by their slot)
    unreadable = False
    for slot in sorted(slots.all_slots(), key=lambda s: (s.chapter, base(s), s.name)):
        op = str(slot.op) if slot.op else ""
        if not slot.ready:
            print(f"{slot.name:<28}{op:>4}  {slot.chapter:<24}{'planned':<9}")
            continue
        try:   # a broken exercise is its rows' verdict; the table goes on with the others
            filled, _ = kernels.exercise_status(slot.family, slot.function)
            verdict = "not implemented yet"
            if filled:
                verdict = check(slot.name, "exercises", trials=1, verbose=False).summary if args.run else ""
        except ValueError as e:   # unreadable file, broken region markers: bad input, exit 2 at the end
            unreadable, filled, verdict = True, False, f"error: {e}"
        print(f"{slot.name:<28}{op:>4}  {slot.chapter:<24}{'ready':<9}"
              f"{'filled' if filled else '?' if verdict.startswith('error') else 'to do':<12}{verdict}")
    return 2 if unreadable else 0


def cmd_check(args) -> int:
    """Exit 0 when every case passes, 1 when one fails or the exercise is not implemented yet."""
    if args.trials < 1:
        print(f"--trials must be at least 1, got {args.trials}", file=sys.stderr)
        return 2
    dtypes = None if args.dtype is None else args.dtype.split(",")
    if dtypes is not None and (len(set(dtypes)) < len(dtypes)           # "," or "" ran the default, a repeat twice
                               or not set(dtypes) <= set(DTYPE_NAMES)):
        print(f"--dtype must be one of {', '.join(DTYPE_NAMES)}, or a comma-separated list of them, each once; "
              f"got {args.dtype!r}", file=sys.stderr)
        return 2
    _setup()
    from . import slots
    from .checking import check
    try:
        slots.get(args.slot)
        if kernels.selected(args.source) == "solutions" and not kernels.has_solutions():   # was a traceback
            asked = "--source solutions" if args.source else "TRITONLLM_KERNELS=solutions"
            raise ValueError(f"{asked}: {kernels.course_root()} has no solutions/ (a student version); check your "
                             "exercise instead (--source exercises)")
        report = check(args.slot, args.source, trials=args.trials, dtype=dtypes, verbose=False)
    except (KeyError, ValueError) as e:
        print(str(e).strip('"'), file=sys.stderr)
        return 2
    print(report)
    return 0 if report.passed else 1


def cmd_make_exercises(args) -> int:
    if not kernels.has_solutions():
        print(f"{kernels.course_root()} has no solutions/ (a student version): its exercises come from the "
              "course and are yours to fill in", file=sys.stderr)
        return 2
    try:
        if args.check:
            problems = exercise_files.drifted()
            print("\n".join(problems) or "exercises/ matches solutions/")
            return 1 if problems else 0
        print("\n".join(exercise_files.update(force=args.force)) or "exercises/ already matches solutions/")
    except regions.RegionError as e:   # a solution's markers are broken: nothing written for it
        print(e, file=sys.stderr)
        return 1
    except exercise_files.ExerciseFileError as e:   # an odd exercise file (a directory, a link, ...): nothing written
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # each file is written whole or not at all
        print("make-exercises interrupted: every exercise is as it was or fully rewritten (a filled-in one with "
              "its backup beside it); run it again to finish", file=sys.stderr)
        return 130
    return 0


def cmd_student_copy(args) -> int:
    try:
        dest, notes = student_version.copy(args.dest)
    except (student_version.StudentVersionError, regions.RegionError) as e:
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # the copy is staged beside the destination, which it replaces only when whole
        print(f"student-copy interrupted: nothing was written to {args.dest}", file=sys.stderr)
        return 130
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"student copy written to {dest} (no solutions/; every exercise unfilled)")
    return 0


def cmd_student_branch(args) -> int:
    try:
        done = student_version.commit_branch(args.branch, args.rev)
    except (student_version.StudentVersionError, regions.RegionError) as e:
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # the branch moves in one update-ref, at the very end
        print(f"student-branch interrupted: the branch {args.branch!r} is where it was, or on the new commit if "
              "the run had finished; the working tree and index are untouched", file=sys.stderr)
        return 130
    if done["dirty"]:
        print(f"note: made from the commit {done['source'][:12]}; uncommitted changes are not in it",
              file=sys.stderr)
    if done["commit"] is None:
        print(f"branch {args.branch!r} already holds the student version of {done['source'][:12]}")
        return 0
    after = f"after {done['parent'][:12]}" if done["parent"] else "its first commit"
    print(f"branch {args.branch!r}: commit {done['commit'][:12]} ({after}): {done['files']} files, no solutions/, "
          f"{done['exercises']} fresh exercises\n"
          f"publish it: git push <remote> {args.branch}; learners merge it with git pull")
    return 0


def cmd_sync_notebooks(args) -> int:
    from .notebooks_tools import NotebookError, sync_all
    from .safe_files import UnsafeWrite
    try:
        paths = sync_all()
    except (NotebookError, UnsafeWrite) as e:
        print(e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # each chapter is written whole or not at all
        print("sync-notebooks interrupted: every chapter is as it was or fully synced; run it again to finish",
              file=sys.stderr)
        return 130
    for path in paths:
        print(f"synced {path.relative_to(kernels.course_root())}")
    return 0


def cmd_colab_links(args) -> int:
    from .colab import colab_url, github_repo
    from .notebooks_tools import chapters
    try:
        if args.repo_url is not None:   # named as the option it came from, not as colab.py's constant
            github_repo(args.repo_url, "--repo-url")
        for path in chapters():
            print(f"{path.name}: {colab_url(path.name, args.repo_url)}")
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


# The commands whose parsers sit beside code that imports torch (several seconds): module, the function that
# adds the parser, the function that runs it (None: the parser sets its own), the line of --help.
_TORCH_COMMANDS = {
    "generate": ("generate_command", "add_generate_parser", "run_generate",
                 "generate tokens with Qwen3.5 (reference model, or the engine: --backend triton)"),
    "bench": ("measure.engine_bench", "add_bench_parser", "run_bench", "the benchmark table (GPU only)"),
    "layers": ("measure.layer_times", "add_layers_parser", None,
               "the engine per layer and per kind of layer (GPU; --config tiny on the CPU)"),
    "targets": ("targets", "add_targets_parser", None,
                "compile every kernel for the learners' GPUs (sm_75 to sm_90) and check its limits"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser. `command` names the subcommand about to run: only its torch-importing parser is built
    (the others are listed in --help as one line each), so `--help`, `--version` and the light commands answer
    in well under a second. None builds every parser."""
    ap = argparse.ArgumentParser(prog="tritonllm-course", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=version_line())
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("progress", help="every slot with its status")
    p.add_argument("--no-run", dest="run", action="store_false", help="do not run the checks")
    p.set_defaults(func=cmd_progress)
    p = sub.add_parser("check", help="check your kernel for one slot")
    p.add_argument("slot")
    p.add_argument("--source", choices=kernels.SOURCES, default=None)
    p.add_argument("--trials", type=int, default=2, help="fresh random inputs per shape (default 2)")
    p.add_argument("--dtype", default=None,
                   help="float32, float16 or bfloat16, or a comma-separated list (default: the mode's)")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("make-exercises", help="bring exercises/ in step with solutions/, keeping your code",
                       description=exercise_files.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="only report what drifted, and how to resolve it")
    p.add_argument("--force", action="store_true",
                   help="rewrite every exercise unfilled (a filled-in one is backed up first)")
    p.set_defaults(func=cmd_make_exercises)
    p = sub.add_parser("student-copy", help="copy the course without solutions/")
    p.add_argument("dest", help="a new or empty folder outside the course")
    p.set_defaults(func=cmd_student_copy)
    p = sub.add_parser("student-branch", help="commit the student version onto a git branch",
                       description=student_version.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--branch", default="student", help="the branch to create or update (default: student)")
    p.add_argument("--rev", default="HEAD", help="the commit of the course to make it from (default: HEAD)")
    p.set_defaults(func=cmd_student_branch)
    p = sub.add_parser("sync-notebooks", help="standard first cell, no outputs, in every notebook")
    p.set_defaults(func=cmd_sync_notebooks)
    p = sub.add_parser("colab-links", help="the Open-in-Colab address of every chapter")
    p.add_argument("--repo-url", default=None, help="instead of colab.REPO_URL")
    p.set_defaults(func=cmd_colab_links)
    for name, (module, add, run, summary) in _TORCH_COMMANDS.items():
        if command is not None and command != name:   # listed in --help, its parser (and torch) left unloaded
            sub.add_parser(name, help=summary, add_help=False).add_argument("rest", nargs=argparse.REMAINDER)
            continue
        try:
            interpreter_unless_gpu()     # before the module's import of triton: on a CPU, the interpreter
            mod = importlib.import_module(f".{module}", __package__)
        except ImportError as e:   # torch (or what the command needs) missing: say so when it is asked for
            p = sub.add_parser(name, help=summary, add_help=False)
            p.add_argument("rest", nargs=argparse.REMAINDER)
            p.set_defaults(func=lambda args, e=e, name=name: _unavailable(name, e))
            continue
        p = getattr(mod, add)(sub)
        if run:
            p.set_defaults(func=getattr(mod, run))
    return ap


def _unavailable(name: str, error: ImportError) -> int:
    print(f"`{name}` cannot run here: {error}", file=sys.stderr)
    return 2


def version_line() -> str:
    """`--version`: the course, its folder, and the triton and torch it runs with (read from the installed
    packages' metadata, without importing them, so that it answers at once)."""
    from importlib import metadata
    found = []
    for dist in ("triton", "torch"):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            found.append(f"{dist} not installed")
    folder, why = course_folder(), course_root_error()
    where = why or (f"course folder {folder}" if folder else
                    "no course folder: run from it or set TRITONLLM_COURSE_ROOT")
    return f"tritonllm-course {__version__} ({', '.join(found)}; {where})"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv and not argv[0].startswith("-") else "").parse_args(argv)
    if (why := course_root_error()) is not None:
        print(f"tritonllm-course: error: {why}", file=sys.stderr)
        return 2
    if course_folder() is None:   # every command reads the course's kernels, chapters or exercises
        print(f"tritonllm-course: {NO_COURSE}", file=sys.stderr)
        return 2
    try:
        rc = args.func(args) or 0
        sys.stdout.flush()       # a pipe closed early breaks here, not in the interpreter's exit
    except SetupError as e:      # TRITONLLM_DTYPE and the like, read by whichever command sets the runtime up
        print(f"tritonllm-course: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`tritonllm-course progress | head`): stop quietly, as a Unix tool does, with
        # stdout pointed at /dev/null so that the exit's own flush has nowhere to fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141               # 128 + SIGPIPE, what a shell reports for a tool stopped by a closed pipe
    return rc


if __name__ == "__main__":
    sys.exit(main())
