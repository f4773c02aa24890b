"""The student version of the course: everything but solutions/, every exercise fresh (unfilled).

Its tests run against the exercises: with no solutions/ beside them, tests/conftest.py points every kernel
the tests load at exercises/ and skips a test whose exercise is not filled in yet (saying which).

Two forms of it:
  copy(dest)          a folder, from the course as it is on disk (`tritonllm-course student-copy DEST`)
  commit_branch(...)  one commit on a branch of the course's git repository, from its committed HEAD
                      (`tritonllm-course student-branch`). Each update is one new commit whose only parent
                      is the branch's previous commit: the branch has a history of its own that never
                      holds a solution, and learners who cloned it `git pull` the update. Their filled-in
                      regions merge, since a stub changes only where its solution's region changes (the
                      stub names its function, not its line). Written with git plumbing and a temporary
                      index, so the instructor's working tree, index and checked-out branch are untouched.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import kernels, regions
from .exercise_files import fresh_exercises

# never handed out: the solutions, and what a machine or a run leaves behind
IGNORED = ("solutions", ".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", ".ipynb_checkpoints",
           ".whl", "*.bak")


class StudentVersionError(ValueError):
    """A student version that cannot be written as asked (one line saying why)."""


def copy(dest: str | Path) -> Path:
    """Write the student version into `dest` (a new or empty folder outside the course); returns it."""
    root, dest = kernels.course_root().resolve(), Path(dest).resolve()
    if dest == root or root in dest.parents:
        raise StudentVersionError(f"{dest} is inside the course ({root}): choose a folder outside it")
    if dest.exists() and any(dest.iterdir()):
        raise StudentVersionError(f"{dest} exists and is not empty")
    if not (root / "solutions").is_dir():   # a copy of this one would hand out the learner's code
        raise StudentVersionError(f"{root} has no solutions/: a student version is made from the full course")
    exercises = fresh_exercises(root)   # read before copying: a broken solution leaves no half copy
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns(*IGNORED), dirs_exist_ok=True)
    for path, text in exercises.items():
        (dest / "exercises" / path.name).write_text(text)
    return dest


def _run(top: Path, *args: str, env: dict | None = None, stdin: str | None = None):
    return subprocess.run(["git", "-C", str(top), *args], input=stdin, capture_output=True, text=True, env=env)


def _git(top: Path, *args: str, env: dict | None = None, stdin: str | None = None, strip: bool = True) -> str:
    """git's output; a failure is a StudentVersionError with git's last line of complaint."""
    run = _run(top, *args, env=env, stdin=stdin)
    if run.returncode != 0:
        said = (run.stderr or run.stdout).strip().splitlines()
        raise StudentVersionError(f"git {args[0]} failed: {said[-1] if said else f'exit {run.returncode}'}")
    return run.stdout.strip() if strip else run.stdout


def commit_branch(branch: str = "student", rev: str = "HEAD", root: Path | None = None) -> dict:
    """Commit the student version of `rev` onto `branch` (created if missing). Returns {"commit": sha or
    None when the branch already holds this version, "parent": the previous student commit or None,
    "files": files in the tree, "exercises": exercises written, "dirty": uncommitted changes left out}."""
    root = (root or kernels.course_root()).resolve()
    top = Path(_git(root, "rev-parse", "--show-toplevel")).resolve()
    prefix = "" if top == root else root.relative_to(top).as_posix() + "/"
    ref = f"refs/heads/{branch}"
    _git(top, "check-ref-format", ref)
    if _run(top, "symbolic-ref", "-q", "HEAD").stdout.strip() == ref:
        raise StudentVersionError(f"the branch {branch!r} is checked out here: run this from the instructors' "
                                  "branch (the one with solutions/)")
    source = _git(top, "rev-parse", "--verify", f"{rev}^{{commit}}")
    solutions = [p for p in _git(top, "ls-tree", "-r", "--name-only", source, "--", f"{prefix}solutions/")
                 .splitlines() if p.endswith(".py") and not p.endswith("/__init__.py")]
    if not solutions:
        raise StudentVersionError(f"{rev} has no {prefix}solutions/: run this from the instructors' branch")
    found = _run(top, "rev-parse", "--verify", "-q", ref)
    parent = found.stdout.strip() if found.returncode == 0 else None
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(top, "read-tree", source, env=env)
        gone = _git(top, "ls-files", "-z", "--", f"{prefix}solutions", env=env, strip=False)
        _git(top, "update-index", "-z", "--force-remove", "--stdin", env=env, stdin=gone)
        for path in solutions:
            name = path.rsplit("/", 1)[1]
            text = regions.make_exercise(_git(top, "cat-file", "blob", f"{source}:{path}", strip=False), name[:-3])
            blob = _git(top, "hash-object", "-w", "--stdin", stdin=text)
            _git(top, "update-index", "--add", "--cacheinfo", f"100644,{blob},{prefix}exercises/{name}", env=env)
        tree = _git(top, "write-tree", env=env)
        files = len(_git(top, "ls-files", env=env).splitlines())
    # uncommitted changes are not in the student version, which is made from a commit (diff-index, unlike
    # status, never rewrites the index)
    dirty = bool(_git(top, "diff-index", "--name-only", "HEAD", "--"))
    result = {"commit": None, "parent": parent, "files": files, "exercises": len(solutions), "dirty": dirty,
              "source": source}
    if parent and _git(top, "rev-parse", f"{parent}^{{tree}}") == tree:
        return result   # the branch already holds this student version
    message = (f"Student version of the course ({source[:12]}): no solutions/, every exercise fresh\n\n"
               "Merge it into your clone (git pull): your filled-in regions are kept.\n")
    commit = _git(top, "commit-tree", tree, *(["-p", parent] if parent else []), stdin=message)
    _git(top, "update-ref", "-m", "student-branch", ref, commit, parent or "0" * len(commit))
    result["commit"] = commit
    return result

