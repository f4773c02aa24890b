"""`tritonllm-course student-branch`: the student version as a git branch of its own history, updated by
one commit per change of the course, which a learner's clone merges without losing its filled regions;
the instructor's working tree, index and branch untouched."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import filled
from tritonllm_course import cli, regions
from tritonllm_course.student_version import IGNORED

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.needs_solutions
IDENTITY = {"GIT_AUTHOR_NAME": "Course", "GIT_AUTHOR_EMAIL": "course@example.org",
            "GIT_COMMITTER_NAME": "Course", "GIT_COMMITTER_EMAIL": "course@example.org"}


def git(where: Path, *args: str) -> str:
    run = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                         env={**os.environ, **IDENTITY})
    assert run.returncode == 0, f"git {' '.join(args)}: {run.stderr}"
    return run.stdout.strip()


@pytest.fixture
def course(tmp_path, monkeypatch):
    """The course, solutions included, as a fresh repository with one commit on `main`."""
    repo = tmp_path / "course"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(*IGNORED, "results"))
    shutil.copytree(ROOT / "solutions", repo / "solutions")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the course")
    for name, value in IDENTITY.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(repo))
    return repo


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
    (course / "solutions" / "vector_add.py").write_text('"""Chapter 01."""\n' + solution)
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
    assert merged == '"""Chapter 01."""\n' + mine
    assert (learner / "README.md").read_text().endswith("A new note.\n") and not (learner / "solutions").exists()


def test_the_student_branch_is_not_written_from_itself(course, capsys):
    assert student_branch(capsys)[0] == 0
    git(course, "checkout", "-q", "student")
    status, out = student_branch(capsys)
    assert status == 2 and "is checked out here" in out
    status, out = student_branch(capsys, "--branch", "other")
    assert status == 2 and "has no solutions/" in out
