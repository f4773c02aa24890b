"""The student version of the course: every exercise fresh (unfilled); no solutions/, nor what would
give them away (`WITHHELD`).

Its tests run against the exercises: with no solutions/ beside them, tests/conftest.py points every kernel
the tests load at exercises/ and skips a test whose exercise is not filled in yet (saying which).

Two forms of it:
  copy(dest)          a folder, from the course's tracked files as they are on disk, no link followed out
                      of it (`tritonllm-course student-copy DEST`)
  commit_branch(...)  one commit on a branch of the course's git repository, from its committed HEAD
                      (`tritonllm-course student-branch`). Each update is one new commit whose only parent
                      is the branch's previous commit: the branch has a history of its own that never
                      holds a solution, and learners who cloned it `git pull` the update. Their filled-in
                      regions merge, since a stub changes only where its solution's region changes (the
                      stub names its function, not its line). Written with git plumbing and a temporary
                      index, so the instructor's working tree, index and checked-out branch are untouched.
                      Each commit carries a `Student-version-of` trailer, and a branch with any commit
                      without it, or with solutions/ anywhere in its history, is never moved.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import tempfile
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from . import kernels, regions, safe_files
from .exercise_files import ExerciseFileError, fresh_exercises

# What the student version leaves out: the two lists both forms follow (`withheld`).
# Names, wherever they are: the solutions, and what a machine or a run leaves behind.
IGNORED = ("solutions", ".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", ".ipynb_checkpoints",
           ".whl", "*.bak")
# Paths from the course root (fnmatch patterns, one per path component; a folder's covers all under it):
# what gives the solutions away line for line (the planted-bug tables, whose search strings are the
# solutions' lines; the lab's probes, which hold variants of the kernels; tests/tools/test_student_leaks.py finds
# them), and the tests that read those (the folders tests/planted and tests/lab, whole).
WITHHELD = ("tests/planted", "lab/*.py", "tests/lab")
# The folders the tests import their shared modules from by bare name (pyproject.toml's pytest `pythonpath`):
# `import planted` is tests/planted/planted.py, which a student version leaves out (`module_files`).
TEST_MODULE_DIRS = ("tests", "tests/planted")


def withheld(path: str | PurePosixPath) -> bool:
    """Whether the course's file or folder at `path` ('/'-separated, from the course root) stays out of the
    student version: a WITHHELD pattern matches it or a folder above it, or an IGNORED one any of its names."""
    parts = PurePosixPath(path).parts
    if any(fnmatchcase(part, name) for part in parts for name in IGNORED):
        return True
    for pattern in WITHHELD:
        want = PurePosixPath(pattern).parts
        if len(parts) >= len(want) and all(fnmatchcase(p, w) for p, w in zip(parts, want)):
            return True
    return False


def module_files(module: str) -> str:
    """The course files that the module `module` (dotted) would be, space-separated, for `withheld_named`: a
    shared test module of a `TEST_MODULE_DIRS` folder, a package, a module from the course root."""
    top = module.split(".")[0]
    return " ".join([f"{folder}/{top}.py" for folder in TEST_MODULE_DIRS]
                    + [f"{top}/__init__.py", f"{module.replace('.', '/')}.py"]) + " "


def withheld_named(text: str, root: Path) -> str | None:
    """The first `.py` file that `text` (an error message) names, relative to the course root `root` or
    absolute under it, that the student version leaves out: what a test of a student version that failed
    with that message needed. None when it names none."""
    for word in re.findall(r"[\w./-]+\.py\b", text):
        path = Path(word)
        if path.is_absolute():
            if root not in path.parents:
                continue
            path = path.relative_to(root)
        if withheld(path.as_posix()):
            return path.as_posix()
    return None


class StudentVersionError(ValueError):
    """A student version that cannot be written as asked (one line saying why)."""


# git's output read as the file system names files: a name that is not UTF-8 keeps its bytes (as surrogates,
# as os.fsdecode does), so it is handed back to git and to the file system exactly as it came.
_GIT_TEXT = {"encoding": "utf-8", "errors": "surrogateescape"}


def _tracked(root: Path) -> list[str]:
    """The course's tracked files ('/'-separated, from `root`): `git ls-files`, so that nothing a machine or a
    person left in the folder (a `.env`, scratch notes, a download) is handed out."""
    try:
        run = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, **_GIT_TEXT)
    except OSError as e:
        raise StudentVersionError(f"git cannot be run ({e.strerror or e}): student-copy hands out the course's "
                                  "tracked files only (git ls-files)") from None
    if run.returncode != 0:
        raise StudentVersionError(f"{root} is not a git checkout: student-copy hands out the course's tracked files "
                                  "only (git ls-files), so it runs in a clone of the course")
    return sorted(p for p in run.stdout.split("\0") if p)


def _check_destination(dest: str | Path, root: Path) -> Path:
    if not str(dest).strip():   # Path("") is the current folder: an empty argument must not silently mean it
        raise StudentVersionError("the destination is empty: name a new or empty folder outside the course")
    try:
        return _check_new_folder(Path(dest), root)
    except OSError as e:   # a name too long, a loop of links, a folder that cannot be searched
        raise StudentVersionError(f"{dest} cannot be used: {e.strerror or e}") from None


def _check_new_folder(given: Path, root: Path) -> Path:
    if given.is_symlink() and not given.exists():
        raise StudentVersionError(f"{given} is a symbolic link to nothing: choose a new or empty folder")
    dest = safe_files.resolved(given)
    if dest == root or root in dest.parents:
        raise StudentVersionError(f"{dest} is inside the course ({root}): choose a folder outside it")
    if dest.exists() and not dest.is_dir():
        raise StudentVersionError(f"{dest} is a file, not a folder: choose a new or empty folder")
    above = next((folder for folder in dest.parents if folder.exists()), None)   # the folder it is made in
    if above is not None and not above.is_dir():   # was "cannot be created: File exists", of a file not there
        raise StudentVersionError(f"{dest} cannot be created: {above} is a file, not a folder")
    try:
        if dest.exists() and any(dest.iterdir()):
            raise StudentVersionError(f"{dest} exists and is not empty")
    except OSError as e:
        raise StudentVersionError(f"{dest} cannot be read: {e.strerror or e}") from None
    return dest


def copy(dest: str | Path) -> tuple[Path, list[str]]:
    """Write the student version into `dest` (a new or empty folder outside the course); returns it and a note
    per file left out that was not meant to be (a link out of the course, a tracked file gone).

    What it holds: the course's tracked files (`git ls-files`; a folder that is no git checkout is refused)
    as they are on disk, less what `withheld` names, with every exercise fresh. A symbolic link is followed
    only to a file that is itself handed out, and copied as that file; a link out of the course, or to a file
    that is not handed out, is left out, saying so. Written into a temporary folder beside `dest` that then
    takes its place, so a failure leaves no half copy."""
    root = kernels.course_root().resolve()
    dest = _check_destination(dest, root)
    if not (root / "solutions").is_dir():   # a copy of this one would hand out the learner's code
        raise StudentVersionError(f"{root} has no solutions/: a student version is made from the full course")
    tracked = _tracked(root)
    if not any(p.startswith("solutions/") and p.endswith(".py") for p in tracked):   # else an empty hand-out
        raise StudentVersionError(f"{root} has no solutions/ committed (git ls-files lists none): student-copy "
                                  "hands out the course's tracked files, so commit the course first")
    handed = {p for p in tracked if not withheld(p)}
    try:   # read before writing: a broken solution leaves no copy at all
        exercises = {path: text for path, text in fresh_exercises(root).items()
                     if f"solutions/{path.name}" in tracked}
    except ExerciseFileError as e:
        raise StudentVersionError(f"{e}; nothing was written") from None
    notes, files = [], {}
    for rel in sorted(handed):
        try:
            real = safe_files.resolved(root / rel)
        except OSError as e:
            notes.append(f"left out {rel}: {e.strerror or e}")
            continue
        if real != root / rel and root not in real.parents:
            notes.append(f"left out {rel}: a symbolic link out of the course (to {real})")
        elif not real.exists():
            notes.append(f"left out {rel}: tracked, but not on disk" if real == root / rel else
                         f"left out {rel}: a symbolic link to nothing")
        elif real.is_dir():
            notes.append(f"left out {rel}: a folder (a submodule, or a link to a folder), not a file")
        elif real != root / rel and real.relative_to(root).as_posix() not in handed:
            notes.append(f"left out {rel}: a symbolic link to {real.relative_to(root)}, which is not handed out")
        else:
            files[rel] = real
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{dest.name[:200]}.", dir=dest.parent))   # a name within 255
    except OSError as e:
        raise StudentVersionError(f"{dest} cannot be created: {e.strerror or e}") from None
    try:
        for rel, real in files.items():
            try:   # a regular file only: a tracked file replaced by a fifo would block the copy forever
                data = safe_files.read_regular(real, follow_links=False)
            except safe_files.UnreadableFile as e:
                raise StudentVersionError(f"{e}; nothing was written") from None
            safe_files.atomic_write_bytes(stage / rel, data, stage, mode=real.stat().st_mode & 0o777)
        for path, text in exercises.items():
            safe_files.atomic_write_text(stage / "exercises" / path.name, text, stage)
        os.chmod(stage, 0o777 & ~safe_files.umask())   # mkdtemp's folder is private: the copy is not
        os.replace(stage, dest)   # onto a missing or empty folder only
    except (OSError, safe_files.UnsafeWrite) as e:
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise StudentVersionError(f"{dest} was filled while the copy was written (another run?): "
                                      "it is left as it is; choose a new or empty folder") from None
        raise StudentVersionError(f"{dest} cannot be written: {getattr(e, 'strerror', None) or e}") from None
    except BaseException:   # Ctrl-C, or a refusal above: no half copy left beside the destination
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return dest, notes


def _run(top: Path, *args: str, env: dict | None = None, stdin: str | None = None):
    try:
        return subprocess.run(["git", "-C", str(top), *args], input=stdin, capture_output=True, env=env,
                              **_GIT_TEXT)
    except FileNotFoundError:
        raise StudentVersionError("git cannot be run: it is not installed or not on the PATH") from None
    except OSError as e:   # an argument longer than the system passes to a program, say
        raise StudentVersionError(f"git {args[0]} cannot be run: {e.strerror or e}") from None


def _git(top: Path, *args: str, env: dict | None = None, stdin: str | None = None, strip: bool = True) -> str:
    """git's output; a failure is a StudentVersionError with git's complaint: its first `fatal:` or `error:`
    line (what went wrong; the lines after it are advice), else its last line."""
    run = _run(top, *args, env=env, stdin=stdin)
    if run.returncode != 0:
        said = [line for line in (run.stderr or run.stdout).strip().splitlines() if line.strip()]
        first = next((line for line in said if line.startswith(("fatal:", "error:"))), said[-1] if said else None)
        raise StudentVersionError(f"git {args[0]} failed: {first or f'exit {run.returncode}'}")
    return run.stdout.strip() if strip else run.stdout


# Every commit of a student branch says it was made here, and from which commit of the course: a branch whose
# history holds another commit (an instructor's branch, one with solutions in it) is never moved.
TRAILER = "Student-version-of"


def check_branch_name(top: Path, branch: str) -> str:
    """`branch` when git takes it as a new branch's short name, else a StudentVersionError that says so."""
    if not isinstance(branch, str):
        raise StudentVersionError(f"--branch must be a branch name, got {type(branch).__name__}")
    if branch.startswith("refs/") or branch in ("HEAD", "@") or "\0" in branch:
        raise StudentVersionError(f"invalid branch name {branch!r}: give the branch's short name, such as 'student'")
    run = _run(top, "check-ref-format", "--branch", branch)
    if run.returncode != 0 or run.stdout.strip() != branch:   # `@{-1}`, `@` name another branch: never taken
        raise StudentVersionError(f"invalid branch name {branch!r}: `git check-ref-format --branch` refuses it "
                                  "(no spaces, '..', '~', '^', ':', '?', '*', '[', '@{' or leading '-')")
    # a branch named like a tag or a remote makes that name ambiguous to every git command that reads it
    for other in (f"refs/tags/{branch}", f"refs/remotes/{branch}", f"refs/remotes/{branch}/HEAD", f"refs/{branch}"):
        if _run(top, "rev-parse", "--verify", "-q", other).returncode == 0:
            raise StudentVersionError(f"--branch {branch!r} is already the name of {other}: a branch of that name "
                                      "would make it ambiguous; choose another --branch")
    return branch


def _worktrees_on(top: Path, ref: str) -> list[Path]:
    """The worktrees of the repository that have `ref` checked out."""
    found, path = [], None
    for line in _git(top, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line[len("worktree "):])
        elif line == f"branch {ref}" and path is not None:
            found.append(path)
    return found


def _check_history(top: Path, ref: str, branch: str, prefix: str) -> None:
    """Refuses an existing branch any of whose commits this tool did not make, or that holds solutions/."""
    made = _git(top, "log", f"--format=%H%x09%(trailers:key={TRAILER},valueonly,separator=%x2C)", ref, "--")
    foreign = [sha for sha, _, value in (line.partition("\t") for line in made.splitlines()) if not value.strip()]
    if foreign:
        raise StudentVersionError(
            f"the branch {branch!r} holds {len(foreign)} commit(s) that student-branch did not make "
            f"(first {foreign[0][:12]}): it is never moved; choose another --branch")
    held = _git(top, "rev-list", "--full-history", "-n", "1", ref, "--", f"{prefix}solutions")
    if held:
        raise StudentVersionError(f"the branch {branch!r} holds {prefix}solutions/ in its history (commit "
                                  f"{held[:12]}): publishing it would hand out the solutions; choose another --branch")


def commit_branch(branch: str = "student", rev: str = "HEAD", root: Path | None = None) -> dict:
    """Commit the student version of `rev` onto `branch` (created if missing). Returns {"commit": sha or
    None when the branch already holds this version, "parent": the previous student commit or None,
    "files": files in the tree, "exercises": exercises written, "dirty": uncommitted changes left out}.

    Refused, before anything is written: a name git would not take for a new branch (and `HEAD`, `@`,
    `refs/...`); a branch checked out in any worktree; an existing branch with a commit not made here (each
    commit carries the `Student-version-of` trailer) or with solutions/ anywhere in its history; a `rev` that
    does not name one commit. git is run without a shell, so no name or rev is ever run as a command."""
    root = (root or kernels.course_root()).resolve()
    found = _run(root, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise StudentVersionError(f"{root} is not a git checkout: student-branch commits to the course's repository")
    top = Path(found.stdout.strip()).resolve()
    prefix = "" if top == root else root.relative_to(top).as_posix() + "/"
    ref = f"refs/heads/{check_branch_name(top, branch)}"
    if _run(top, "symbolic-ref", "-q", "HEAD").stdout.strip() == ref:
        raise StudentVersionError(f"the branch {branch!r} is checked out here: run this from the instructors' "
                                  "branch (the one with solutions/)")
    if elsewhere := _worktrees_on(top, ref):
        raise StudentVersionError(f"the branch {branch!r} is checked out in the worktree {elsewhere[0]}: "
                                  "check out another branch there first")
    if not isinstance(rev, str) or not rev or rev.startswith("-") or "\0" in rev:
        raise StudentVersionError(f"--rev {rev!r} does not name one commit")
    named = _run(top, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}")
    if named.returncode != 0:
        raise StudentVersionError(f"--rev {rev!r} does not name one commit of {top}")
    source = named.stdout.strip()
    solutions = [p for p in _git(top, "ls-tree", "-r", "--name-only", source, "--", f"{prefix}solutions/")
                 .splitlines() if p.endswith(".py") and not p.endswith("/__init__.py")]
    if not solutions:
        raise StudentVersionError(f"{rev} has no {prefix}solutions/: run this from the instructors' branch")
    linked = _run(top, "symbolic-ref", "-q", ref)
    if linked.returncode == 0:   # moving it would move (or make) the ref it names, a tag or another branch
        raise StudentVersionError(f"the branch {branch!r} is a symbolic ref to {linked.stdout.strip()}: it is "
                                  "never moved; choose another --branch")
    found = _run(top, "rev-parse", "--verify", "-q", ref)
    parent = found.stdout.strip() if found.returncode == 0 else None
    if parent:
        _check_history(top, ref, branch, prefix)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(top, "read-tree", source, env=env)
        gone = "".join(f"{path}\0" for path in _git(top, "ls-files", "-z", "--", prefix or ".", env=env,
                                                    strip=False).split("\0")
                       if path and withheld(path[len(prefix):]))
        _git(top, "update-index", "-z", "--force-remove", "--stdin", env=env, stdin=gone)
        for path in solutions:
            name = path.rsplit("/", 1)[1]
            solution = _git(top, "cat-file", "blob", f"{source}:{path}", strip=False)
            try:   # as make-exercises reads a solution: UTF-8 text or refused by name
                solution.encode("utf-8")
            except UnicodeEncodeError:
                raise StudentVersionError(f"{path} in {rev} is not UTF-8 text: no student version is made from it; "
                                          "save it as UTF-8 and commit it") from None
            text = regions.make_exercise(solution, name[:-3])
            blob = _git(top, "hash-object", "-w", "--stdin", stdin=text)
            _git(top, "update-index", "--add", "--cacheinfo", f"100644,{blob},{prefix}exercises/{name}", env=env)
        tree = _git(top, "write-tree", env=env)
        files = len(_git(top, "ls-files", env=env).splitlines())
    # uncommitted changes are not in the student version, which is made from a commit (diff-index, unlike
    # status, never rewrites the index)
    head = _run(top, "rev-parse", "--verify", "-q", "HEAD^{commit}").stdout.strip()   # none on an unborn branch
    dirty = head == source and bool(_git(top, "diff-index", "--name-only", "HEAD", "--"))
    result = {"commit": None, "parent": parent, "files": files, "exercises": len(solutions), "dirty": dirty,
              "source": source}
    if parent and _git(top, "rev-parse", f"{parent}^{{tree}}") == tree:
        return result   # the branch already holds this student version
    message = (f"Student version of the course ({source[:12]}): no solutions/, every exercise fresh\n\n"
               "Merge it into your clone (git pull): your filled-in regions are kept.\n\n"
               f"{TRAILER}: {source}\n")
    commit = _git(top, "commit-tree", tree, *(["-p", parent] if parent else []), stdin=message)
    _git(top, "update-ref", "--no-deref", "-m", "student-branch", ref, commit, parent or "0" * len(commit))
    result["commit"] = commit
    return result

