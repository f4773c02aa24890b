"""`tritonllm-course student-branch`: the student version as a git branch of its own history, updated by
one commit per change of the course, which a learner's clone merges without losing its filled regions;
the instructor's working tree, index and branch untouched. It never moves a branch it did not make, nor
one whose history holds solutions/; a bad branch name or --rev is one line."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import filled
from tritonllm_course import cli, regions

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.needs_solutions
IDENTITY = {"GIT_AUTHOR_NAME": "Course", "GIT_AUTHOR_EMAIL": "course@example.org",
            "GIT_COMMITTER_NAME": "Course", "GIT_COMMITTER_EMAIL": "course@example.org"}


def git(where: Path, *args: str) -> str:
    run = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                         env={**os.environ, **IDENTITY})
    assert run.returncode == 0, f"git {' '.join(args)}: {run.stderr}"
    return run.stdout.strip()


def clone(where: Path) -> Path:
    """The course, solutions included, as a fresh repository with one commit on `main` (a shallow clone of
    the course's committed HEAD: faster than copying the folder, and nothing untracked comes along)."""
    repo = where / "course"
    git(where, "clone", "-q", "--depth", "1", "--no-tags", ROOT.as_uri(), str(repo))
    git(repo, "checkout", "-q", "-B", "main")
    return repo


def use(repo: Path, monkeypatch) -> Path:
    for name, value in IDENTITY.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(repo))
    return repo


@pytest.fixture
def course(tmp_path, monkeypatch):
    return use(clone(tmp_path), monkeypatch)


@pytest.fixture(scope="module")
def _untouched(tmp_path_factory):
    return clone(tmp_path_factory.mktemp("refusals"))


@pytest.fixture
def untouched(_untouched, monkeypatch):
    """One clone for the tests that check a refusal changes nothing (each asserts that it did not)."""
    return use(_untouched, monkeypatch)


def student_branch(capsys, *argv) -> tuple[int, str]:
    status = cli.main(["student-branch", *argv])
    out, err = capsys.readouterr()
    return status, out + err


def test_the_student_branch_updates_and_a_learner_merges_it(course, tmp_path, capsys):
    # commands that never write the index (status may refresh it)
    state = lambda: ((course / ".git" / "index").read_bytes(), git(course, "rev-parse", "HEAD"),  # noqa: E731
                     git(course, "symbolic-ref", "HEAD"), git(course, "diff-files", "--name-only"),
                     git(course, "diff-index", "--cached", "--name-only", "HEAD"))
    before = state()
    status, out = student_branch(capsys)
    assert status == 0 and "branch 'student': commit" in out and "git pull" in out, out
    assert state() == before                                   # working tree, index, branch: as they were
    files = git(course, "ls-tree", "-r", "--name-only", "student").splitlines()
    assert not [f for f in files if f.startswith("solutions/")]
    assert "tests/conftest.py" in files and "Makefile" in files
    solution = (course / "solutions" / "vector_add.py").read_text()
    assert git(course, "show", "student:exercises/vector_add.py") + "\n" == regions.make_exercise(solution,
                                                                                                  "vector_add")
    # a learner clones the branch and fills in an exercise
    learner = tmp_path / "learner"
    git(tmp_path, "clone", "-q", "-b", "student", str(course), str(learner))
    mine = filled((learner / "exercises" / "vector_add.py").read_text(), solution)
    (learner / "exercises" / "vector_add.py").write_text(mine)
    git(learner, "commit", "-q", "-am", "my vector add")
    # the course changes: a line above the exercise's region, and a new chapter note
    (course / "solutions" / "vector_add.py").write_text('"""Chapter 01_triton_basics."""\n' + solution)
    (course / "README.md").write_text((course / "README.md").read_text() + "\nA new note.\n")
    git(course, "commit", "-q", "-am", "a change to the course")
    first = git(course, "rev-parse", "student")
    status, out = student_branch(capsys)
    assert status == 0 and f"after {first[:12]}" in out, out
    assert git(course, "rev-list", "--parents", "-n", "1", "student").split()[1:] == [first]   # one parent
    assert git(course, "rev-list", "--count", "student") == "2"
    status, out = student_branch(capsys)                      # nothing new: no commit
    assert status == 0 and "already holds" in out and git(course, "rev-list", "--count", "student") == "2"
    # the learner merges the update: their code and the course's change, no conflict
    git(learner, "pull", "-q", "--no-rebase", "--no-edit")
    merged = (learner / "exercises" / "vector_add.py").read_text()
    assert merged == '"""Chapter 01_triton_basics."""\n' + mine
    assert (learner / "README.md").read_text().endswith("A new note.\n") and not (learner / "solutions").exists()


def test_the_student_branch_is_not_written_from_itself(course, capsys):
    assert student_branch(capsys)[0] == 0
    git(course, "checkout", "-q", "student")
    status, out = student_branch(capsys)
    assert status == 2 and "is checked out here" in out
    status, out = student_branch(capsys, "--branch", "other")
    assert status == 2 and "has no solutions/" in out


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def test_a_branch_it_did_not_make_is_never_moved(course, capsys):
    git(course, "branch", "dev")                                # an instructor's branch, solutions and all
    git(course, "branch", "student")
    before = refs(course)
    for name in ("dev", "student"):
        status, out = student_branch(capsys, f"--branch={name}")
        assert status == 2 and len(out.splitlines()) == 1, out
        assert f"the branch {name!r} holds 1 commit(s) that student-branch did not make" in out
    assert refs(course) == before


def test_a_student_branch_with_a_foreign_commit_or_solutions_in_its_history_is_refused(course, capsys):
    assert student_branch(capsys)[0] == 0
    made = git(course, "rev-parse", "student")
    # a commit that says it was made here but carries the instructors' tree (solutions/ included)
    tree = git(course, "rev-parse", "main^{tree}")
    forged = subprocess.run(["git", "-C", str(course), "commit-tree", tree, "-p", made], capture_output=True,
                            text=True, input="update\n\nStudent-version-of: 0123\n", env={**os.environ, **IDENTITY})
    git(course, "update-ref", "refs/heads/student", forged.stdout.strip())
    status, out = student_branch(capsys)
    assert status == 2 and "holds solutions/ in its history" in out and git(course, "rev-parse", "student") \
        == forged.stdout.strip()
    # a learner's commit on top of a student branch: not made here
    git(course, "update-ref", "refs/heads/student", made)
    git(course, "worktree", "add", "-q", str(course.parent / "wt"), "student")
    status, out = student_branch(capsys)
    assert status == 2 and "is checked out in the worktree" in out and str(course.parent / "wt") in out
    (course.parent / "wt" / "notes.txt").write_text("mine\n")
    git(course.parent / "wt", "add", "notes.txt")
    git(course.parent / "wt", "commit", "-q", "-m", "my notes")
    git(course, "worktree", "remove", "--force", str(course.parent / "wt"))
    status, out = student_branch(capsys)
    assert status == 2 and "1 commit(s) that student-branch did not make" in out
    assert git(course, "rev-parse", "student~1") == made


@pytest.mark.parametrize("name", ["HEAD", "@", "refs/heads/x", "a..b", "", "x y", "-x", "@{-1}", "x.lock",
                                  "$(touch PWN)", "`touch PWN`; touch PWN", "nul\0byte"])
def test_a_name_git_would_not_take_for_a_branch_is_refused_in_one_line(untouched, capsys, name, monkeypatch):
    monkeypatch.chdir(untouched)
    before = refs(untouched)
    status, out = student_branch(capsys, f"--branch={name}")
    assert status == 2 and len(out.splitlines()) == 1 and f"invalid branch name {name!r}" in out, out
    assert refs(untouched) == before and not (untouched / "PWN").exists()     # nothing moved, nothing run


@pytest.mark.parametrize("rev", ["bogus", "--all", "HEAD~5", "-h", "HEAD..HEAD", "", "$(touch PWN)", "nul\0byte"])
def test_a_rev_that_names_no_single_commit_is_one_line_naming_it(untouched, capsys, rev, monkeypatch):
    monkeypatch.chdir(untouched)
    before = refs(untouched)
    status, out = student_branch(capsys, f"--rev={rev}")
    assert status == 2 and len(out.splitlines()) == 1 and f"--rev {rev!r} does not name one commit" in out, out
    assert refs(untouched) == before and not (untouched / "PWN").exists()


@pytest.mark.parametrize("name", ["v1", "up/main"])
def test_a_branch_named_like_a_tag_or_a_remote_branch_is_refused(untouched, capsys, name, monkeypatch):
    monkeypatch.chdir(untouched)
    git(untouched, "tag", "-f", "v1")
    git(untouched, "update-ref", "refs/remotes/up/main", "HEAD")
    before = refs(untouched)
    status, out = student_branch(capsys, f"--branch={name}")
    assert status == 2 and len(out.splitlines()) == 1 and f"--branch {name!r} is already the name of" in out, out
    assert refs(untouched) == before                     # no refs/heads/v1 to make `git show v1` ambiguous


def test_a_name_or_a_solution_that_is_not_utf8_is_kept_or_refused_never_a_traceback(course, capsys):
    odd = os.fsdecode(b"docs/caf\xe9.md")                        # a latin-1 file name: bytes git keeps as they are
    Path(course / odd).write_text("notes\n")
    git(course, "add", "docs")
    git(course, "commit", "-q", "-m", "a latin-1 name")
    status, out = student_branch(capsys)
    assert status == 0, out
    names = subprocess.run(["git", "-C", str(course), "ls-tree", "-r", "-z", "--name-only", "student", "docs"],
                           capture_output=True).stdout.split(b"\0")
    assert b"docs/caf\xe9.md" in names
    (course / "solutions" / "zz_latin.py").write_bytes(b"# BEGIN SOLUTION: x\nx = 'caf\xe9'\n# END SOLUTION\n")
    git(course, "add", "solutions")
    git(course, "commit", "-q", "-m", "a latin-1 solution")
    before = refs(course)
    status, out = student_branch(capsys)
    assert status == 2 and len(out.splitlines()) == 1 and "solutions/zz_latin.py in HEAD is not UTF-8" in out, out
    assert refs(course) == before


def test_no_git_a_locked_ref_or_an_argument_too_long_is_one_line(untouched, capsys, monkeypatch):
    monkeypatch.chdir(untouched)
    before, path = refs(untouched), os.environ["PATH"]
    lock = untouched / ".git" / "refs" / "heads" / "locked.lock"        # another git at work on that branch
    lock.write_text("")
    try:
        status, out = student_branch(capsys, "--branch=locked")
    finally:
        lock.unlink()
    assert status == 2 and len(out.splitlines()) == 1 and "Unable to create" in out and "locked.lock" in out, out
    for argv, said in ((["--rev", "a" * 140_000], "Argument list too long"),     # past what one argument may be
                       (["--branch", "s"], "git cannot be run: it is not installed or not on the PATH")):
        if argv[0] == "--branch":
            monkeypatch.setenv("PATH", str(untouched / "no-such-folder"))
        status, out = student_branch(capsys, *argv)
        assert status == 2 and len(out.splitlines()) == 1 and said in out, out
    monkeypatch.setenv("PATH", path)
    assert refs(untouched) == before


def test_a_symbolic_ref_is_never_moved_and_an_unborn_head_is_no_obstacle(untouched, capsys, monkeypatch):
    monkeypatch.chdir(untouched)
    git(untouched, "symbolic-ref", "refs/heads/alias", "refs/tags/not-yet")     # moving it would make a tag
    try:
        before = refs(untouched)
        status, out = student_branch(capsys, "--branch=alias")
        assert status == 2 and len(out.splitlines()) == 1 and "is a symbolic ref to refs/tags/not-yet" in out, out
        assert refs(untouched) == before
    finally:
        git(untouched, "symbolic-ref", "--delete", "refs/heads/alias")
    git(untouched, "checkout", "-q", "--orphan", "unborn")                   # HEAD names a branch with no commit
    try:
        status, out = student_branch(capsys, "--branch=from-main", "--rev=main")
        assert status == 0 and "note:" not in out, out
        assert git(untouched, "ls-tree", "--name-only", "from-main", "solutions") == ""
    finally:
        git(untouched, "checkout", "-q", "-f", "main")
        git(untouched, "branch", "-q", "-D", "from-main")


def test_ctrl_c_is_one_line_and_moves_no_branch(untouched, capsys, monkeypatch):
    from tritonllm_course import student_version
    monkeypatch.chdir(untouched)
    before, real_git = refs(untouched), student_version._git

    def interrupted(top, *args, **kwargs):       # Ctrl-C while the commit is being made
        if args[0] == "commit-tree":
            raise KeyboardInterrupt
        return real_git(top, *args, **kwargs)

    monkeypatch.setattr(student_version, "_git", interrupted)
    status, out = student_branch(capsys, "--branch=interrupted")
    assert status == 130 and len(out.splitlines()) == 1 and "student-branch interrupted" in out, out
    assert refs(untouched) == before
