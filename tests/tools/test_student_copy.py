"""A student copy (`tritonllm-course student-copy`), every exercise filled in, reaches the end: the CLI
generates tokens from the learner's kernels and the copy's own test suite collects without an error. It
hands out the course's tracked files only, follows no link out of the course, and a destination it cannot
use is one line."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import filled
from tritonllm_course import cli, regions

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.needs_solutions


def fill_every_exercise(course: Path) -> int:
    """Every exercise of `course` filled with the region bodies of the full course's solution."""
    paths = sorted((course / "exercises").glob("*.py"))
    for path in paths:
        path.write_text(filled(path.read_text(), (ROOT / "solutions" / path.name).read_text()))
    return len(paths)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    dest = tmp_path_factory.mktemp("copy") / "student"
    assert cli.main(["student-copy", str(dest)]) == 0
    assert not (dest / "solutions").exists()
    assert all(regions.unfilled_regions(p) for p in (dest / "exercises").glob("*.py"))
    assert fill_every_exercise(dest) == len(list((ROOT / "solutions").glob("*.py")))
    return dest


def in_copy(course: Path, *argv: str, kernels: str | None) -> subprocess.Popen:
    """`python -m ...` inside the copy: its own package (the working directory comes first on sys.path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITONLLM_KERNELS", "PYTEST_ADDOPTS")}
    env.update(TRITONLLM_COURSE_ROOT=str(course), PYTHONDONTWRITEBYTECODE="1")
    if kernels:
        env["TRITONLLM_KERNELS"] = kernels
    return subprocess.Popen([sys.executable, "-m", *argv], cwd=course, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_the_copy_generates_from_the_exercises_and_collects_its_tests(student):
    # both at once: two interpreter-bound processes on two cores
    generate = in_copy(student, "tritonllm_course.cli", "generate", "--model", "random", "--config", "tiny",
                       "--prompt-ids", "5,17,42", "--max-new-tokens", "2", "--backend", "triton",
                       "--dtype", "float32", "--json", kernels=None)          # unset: "auto", the default
    collect = in_copy(student, "pytest", "--collect-only", "-q", kernels="exercises")   # as `make test` there
    out, err = generate.communicate(timeout=300)
    assert generate.returncode == 0, err
    assert len(json.loads(out)["generated_ids"]) == 2
    [line] = [ln for ln in err.splitlines() if ln.startswith("kernels: ")]
    assert "exercises" in line and "solutions" not in line, line        # every slot ran the learner's kernel
    out, err = collect.communicate(timeout=300)
    assert collect.returncode == 0, out[-3000:] + err[-2000:]
    assert "error" not in out.splitlines()[-1].lower(), out.splitlines()[-1]


def student_copy(capsys, dest) -> tuple[int, str]:
    status = cli.main(["student-copy", str(dest)])
    out, err = capsys.readouterr()
    return status, out + err


def test_student_copy_refuses_a_destination_inside_the_course_or_not_empty(tmp_path, capsys):
    inside = ROOT / "exercises" / "student"
    status, out = student_copy(capsys, inside)
    assert status == 2 and "is inside the course" in out and not inside.exists()
    (tmp_path / "x").write_text("")
    status, out = student_copy(capsys, tmp_path)
    assert status == 2 and "exists and is not empty" in out and len(out.splitlines()) == 1
    status, out = student_copy(capsys, tmp_path / "x")
    assert status == 2 and "is a file, not a folder" in out and len(out.splitlines()) == 1
    status, out = student_copy(capsys, tmp_path / "x" / "under")
    assert status == 2 and "cannot be created" in out and len(out.splitlines()) == 1
    status, out = student_copy(capsys, "/proc/tritonllm-student-copy")
    assert status == 2 and "cannot be" in out and len(out.splitlines()) == 1, out
    for empty in ("", " "):                  # Path("") would be the current folder
        status, out = student_copy(capsys, empty)
        assert status == 2 and out.strip() == "the destination is empty: name a new or empty folder outside " \
                                              "the course", out


def git(where: Path, *args: str) -> str:
    run = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                         env={**os.environ, "GIT_AUTHOR_NAME": "C", "GIT_AUTHOR_EMAIL": "c@example.org",
                              "GIT_COMMITTER_NAME": "C", "GIT_COMMITTER_EMAIL": "c@example.org"})
    assert run.returncode == 0, f"git {' '.join(args)}: {run.stderr}"
    return run.stdout.strip()


def test_only_tracked_files_are_handed_out_and_no_link_leads_out_of_the_course(tmp_path, capsys, monkeypatch):
    course, outside = tmp_path / "course", tmp_path / "private"
    git(tmp_path, "clone", "-q", "--depth", "1", "--no-tags", ROOT.as_uri(), str(course))
    outside.mkdir()
    (outside / "private.txt").write_text("mine\n")
    (course / "notebooks" / "linked").symlink_to(outside)                       # a link out of the course
    (course / "docs" / "readme_link.md").symlink_to("../README.md")             # a link to a handed-out file
    (course / "exercises" / "peek.py").symlink_to("../solutions/rmsnorm.py")    # a link to a withheld file
    git(course, "add", "notebooks/linked", "docs/readme_link.md", "exercises/peek.py")
    git(course, "commit", "-q", "-m", "links")
    (course / ".env").write_text("HF_TOKEN=hf_dummy\n")                       # untracked: never handed out
    (course / "scratch_notes").mkdir()
    (course / "scratch_notes" / "answers.py").write_text("x = 1\n")
    (course / "Makefile").chmod(0o750)
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(course))
    status, out = student_copy(capsys, tmp_path / "handout")
    dest = tmp_path / "handout"
    assert status == 0, out
    handed = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file() or p.is_symlink()}
    assert not [p for p in dest.rglob("*") if p.is_symlink()]
    assert {".env", "scratch_notes/answers.py", "notebooks/linked/private.txt", "exercises/peek.py"}.isdisjoint(
        handed) and not any(p.startswith("solutions/") for p in handed)
    assert "note: left out notebooks/linked: a symbolic link out of the course" in out
    assert "note: left out exercises/peek.py: a symbolic link to solutions/rmsnorm.py, which is not handed out" in out
    assert (dest / "docs" / "readme_link.md").read_text() == (course / "README.md").read_text()
    tracked = {p for p in git(course, "ls-files").splitlines() if not p.startswith("solutions/")}
    assert "README.md" in handed and "Makefile" in handed and handed <= tracked
    assert (dest / "Makefile").stat().st_mode & 0o777 == 0o750
    assert all(regions.unfilled_regions(p) for p in (dest / "exercises").glob("*.py"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".handout")]   # no staging folder left


def test_a_folder_that_is_not_a_git_checkout_is_refused(course_copy, tmp_path_factory, capsys):
    (course_copy / "solutions" / "vector_add.py").write_text((ROOT / "solutions" / "vector_add.py").read_text())
    dest = tmp_path_factory.mktemp("elsewhere") / "out"
    status, out = student_copy(capsys, dest)
    assert status == 2 and "is not a git checkout" in out and "tracked files only" in out
    assert not dest.exists()


def test_a_student_copy_is_not_copied_again(student, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(student))     # its filled exercises would be handed out
    assert cli.main(["student-copy", str(tmp_path / "again")]) == 2
    assert "has no solutions/" in capsys.readouterr().err
    assert cli.main(["make-exercises"]) == 2


def test_odd_files_odd_destinations_and_ctrl_c_leave_no_copy(tmp_path, capsys, monkeypatch):
    course = tmp_path / "course"
    git(tmp_path, "clone", "-q", "--depth", "1", "--no-tags", ROOT.as_uri(), str(course))
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(course))
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def refused(dest, said):
        status, out = student_copy(capsys, dest)
        assert status == 2 and len(out.splitlines()) == 1 and said in out, out
        assert os.listdir(out_dir) == []                                   # no copy, no staging folder

    refused(out_dir / ("a" * 256), "cannot be used: File name too long")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    refused(tmp_path / "loop" / "sub", "cannot be used: a loop of symbolic links")
    (course / "Makefile").unlink()
    os.mkfifo(course / "Makefile")                       # a tracked file replaced by a fifo: read, it would block
    refused(out_dir / "a", "Makefile is a fifo, not a regular file: not read; nothing was written")
    (course / "Makefile").unlink()
    git(course, "checkout", "-q", "--", "Makefile")
    (course / "solutions" / "zz_latin.py").write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    git(course, "add", "solutions/zz_latin.py")
    refused(out_dir / "a", "solutions/zz_latin.py is not UTF-8 text")
    git(course, "rm", "-q", "-f", "solutions/zz_latin.py")

    from tritonllm_course import safe_files
    written, calls = safe_files.atomic_write_bytes, []

    def interrupted_on_the_tenth(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 10:
            raise KeyboardInterrupt
        return written(*args, **kwargs)

    monkeypatch.setattr(safe_files, "atomic_write_bytes", interrupted_on_the_tenth)
    status, out = student_copy(capsys, out_dir / "a")
    assert status == 130 and out.strip() == f"student-copy interrupted: nothing was written to {out_dir / 'a'}"
    assert os.listdir(out_dir) == []
    monkeypatch.setattr(safe_files, "atomic_write_bytes", written)
    odd = os.fsdecode(b"docs/caf\xe9.md")                       # a latin-1 file name, handed out as it is
    (course / odd).write_text("notes\n")
    (course / "docs" / "loop").symlink_to("loop")                      # a tracked link to itself: left out
    git(course, "add", "docs")
    git(course, "commit", "-q", "-m", "a latin-1 name, a loop")
    status, out = student_copy(capsys, out_dir / ("b" * 250))          # a long name: its staging folder fits
    assert status == 0 and os.listdir(out_dir) == ["b" * 250], out
    assert "note: left out docs/loop: a loop of symbolic links" in out
    assert (out_dir / ("b" * 250) / odd).read_text() == "notes\n"


def test_a_course_with_no_committed_solutions_is_refused_not_handed_out_empty(course_copy, tmp_path_factory,
                                                                              capsys):
    (course_copy / "solutions" / "vector_add.py").write_text((ROOT / "solutions" / "vector_add.py").read_text())
    git(course_copy, "init", "-q")                                  # a repository with nothing committed
    dest = tmp_path_factory.mktemp("elsewhere") / "out"
    status, out = student_copy(capsys, dest)
    assert status == 2 and len(out.splitlines()) == 1 and "has no solutions/ committed" in out, out
    assert not dest.exists()
