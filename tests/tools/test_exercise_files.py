"""`tritonllm-course make-exercises` never loses a learner's code: stubs are regenerated, a filled-in
exercise that drifted gets its regions carried over and a dated backup, `--check` names the drift."""
import errno
import os
from pathlib import Path

import pytest
import torch

from helpers import filled
from tritonllm_course.runtime import runtime
from tritonllm_course import cli, exercise_files, kernels, regions

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.needs_solutions


@pytest.fixture
def course(course_copy):
    """A scratch course with two families: their solutions and fresh exercises."""
    for family in ("vector_add", "rmsnorm"):
        text = (ROOT / "solutions" / f"{family}.py").read_text()
        (course_copy / "solutions" / f"{family}.py").write_text(text)
        (course_copy / "exercises" / f"{family}.py").write_text(regions.make_exercise(text, family))
    return course_copy


def fill(course, family) -> str:
    """Fill exercises/<family>.py with the solution's region bodies; returns the filled text."""
    path = course / "exercises" / f"{family}.py"
    text = filled(path.read_text(), (course / "solutions" / f"{family}.py").read_text())
    path.write_text(text)
    return text


def make_exercises(capsys, *argv) -> tuple[int, str]:
    status = cli.main(["make-exercises", *argv])
    out, err = capsys.readouterr()
    return status, out + err


def backups(course, family) -> list[Path]:
    return sorted((course / "exercises").glob(f"{family}.py.*.bak"))


def test_a_filled_exercise_edited_outside_its_regions_keeps_the_learners_code(course, capsys, rt):
    mine = fill(course, "vector_add")
    path = course / "exercises" / "vector_add.py"
    path.write_text(mine + "# my note\n")
    status, out = make_exercises(capsys, "--check")
    last = len(mine.splitlines()) + 1
    assert status == 1
    assert (f"exercises/vector_add.py differs from solutions/vector_add.py outside the exercise regions "
            f"(line {last}") in out
    assert "-# my note" in out and "your region bodies carried over" in out and "make-exercises" in out

    status, out = make_exercises(capsys)
    assert status == 0
    [kept] = backups(course, "vector_add")
    assert kept.name.startswith("vector_add.py.20") and str(kept.relative_to(course)) in out
    assert kept.read_text() == mine + "# my note\n"          # the file as it was, the note included
    assert path.read_text() == mine                          # the learner's code, the note gone
    assert make_exercises(capsys, "--check") == (0, "exercises/ matches solutions/\n")
    add = kernels.get("vector_add", "add", "exercises")      # still the learner's kernel, and it runs
    x = torch.randn(300, device=runtime().device)
    torch.testing.assert_close(add(x, x), 2 * x)


def test_a_solution_changed_outside_its_regions_updates_the_exercise_around_the_learners_code(course, capsys):
    mine = fill(course, "rmsnorm")
    solution, before = course / "solutions" / "rmsnorm.py", (course / "solutions" / "rmsnorm.py").read_text()
    solution.write_text('"""A new first line."""\n' + before)
    status, out = make_exercises(capsys)
    text = (course / "exercises" / "rmsnorm.py").read_text()
    assert text == '"""A new first line."""\n' + mine and "your code carried over" in out
    assert backups(course, "rmsnorm")[0].read_text() == mine
    # the stubs name their function, not their line: a line added above them leaves them as they were
    stubs = lambda text: [r.body for r in regions.regions(regions.make_exercise(text, "rmsnorm"))]  # noqa: E731
    assert stubs(solution.read_text()) == stubs(before)


def test_regions_that_no_longer_correspond_leave_the_code_in_the_backup(course, capsys):
    mine = fill(course, "vector_add")
    solution = course / "solutions" / "vector_add.py"
    solution.write_text(solution.read_text().replace("# BEGIN SOLUTION: offsets", "# BEGIN SOLUTION: the offsets"))
    status, out = make_exercises(capsys, "--check")
    assert status == 1 and "another hint" in out and "copy your code into the new regions" in out
    status, out = make_exercises(capsys)
    [kept] = backups(course, "vector_add")
    assert kept.read_text() == mine and f"kept as {kept.relative_to(course)}" in out
    assert exercise_files.is_stub((course / "exercises" / "vector_add.py").read_text())


def test_unfilled_and_missing_exercises_are_regenerated_without_backup(course, capsys):
    (course / "exercises" / "rmsnorm.py").unlink()
    path = course / "exercises" / "vector_add.py"
    path.write_text(path.read_text() + "# drifted\n")
    status, out = make_exercises(capsys, "--check")
    assert status == 1 and "rmsnorm.py is missing" in out and "still unfilled" in out
    status, out = make_exercises(capsys)
    assert "wrote exercises/rmsnorm.py (new)" in out and "wrote exercises/vector_add.py (still unfilled" in out
    assert not list((course / "exercises").glob("*.bak"))
    for family in ("vector_add", "rmsnorm"):
        fresh = regions.make_exercise((course / "solutions" / f"{family}.py").read_text(), family)
        assert (course / "exercises" / f"{family}.py").read_text() == fresh


def test_a_filled_exercise_that_matches_is_left_alone_and_force_backs_it_up(course, capsys):
    mine = fill(course, "vector_add")
    assert make_exercises(capsys) == (0, "exercises/ already matches solutions/\n")
    assert (course / "exercises" / "vector_add.py").read_text() == mine and not backups(course, "vector_add")
    status, out = make_exercises(capsys, "--force")
    [kept] = backups(course, "vector_add")
    assert kept.read_text() == mine and "--force" in out and str(kept.relative_to(course)) in out
    assert exercise_files.is_stub((course / "exercises" / "vector_add.py").read_text())


def test_backups_are_not_kernel_modules(course):
    mine = fill(course, "vector_add")
    kept = exercise_files.backup(course / "exercises" / "vector_add.py")
    again = exercise_files.backup(course / "exercises" / "vector_add.py")
    assert kept != again and kept.read_text() == again.read_text() == mine
    assert {p.name for p in (course / "exercises").glob("*.py")} == {"vector_add.py", "rmsnorm.py"}
    assert kernels.exercise_status("vector_add")[0]


def test_a_symlinked_exercise_is_never_written_through(course, capsys, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside") / "system_file.py"
    outside.write_text("precious\n")
    (course / "exercises" / "rmsnorm.py").unlink()
    path = course / "exercises" / "vector_add.py"
    path.unlink()
    path.symlink_to(outside)
    status, out = make_exercises(capsys)
    assert status == 2 and len(out.splitlines()) == 1, out
    assert "exercises/vector_add.py is a symbolic link" in out
    assert outside.read_text() == "precious\n" and path.is_symlink()
    assert not (course / "exercises" / "rmsnorm.py").exists()        # checked all before writing any
    assert make_exercises(capsys, "--check")[0] == 2


@pytest.mark.parametrize("odd", ["directory", "latin-1", "fifo"])
def test_an_odd_exercise_file_is_one_line_and_nothing_is_written(course, capsys, odd):
    path = course / "exercises" / "vector_add.py"
    (course / "exercises" / "rmsnorm.py").unlink()
    if odd == "directory":
        path.unlink()
        path.mkdir()
        said = "exercises/vector_add.py is a directory"
    elif odd == "fifo":                                # read, it would block the tool forever
        path.unlink()
        os.mkfifo(path)
        said = "exercises/vector_add.py is a fifo, not a regular file"
    else:
        path.write_bytes(fill(course, "vector_add").encode() + "# caf\xe9\n".encode("latin-1"))
        said = "exercises/vector_add.py is not UTF-8 text (byte 0xe9 on line"
    before = path.read_bytes() if path.is_file() else None
    for argv in ((), ("--check",), ("--force",)):
        status, out = make_exercises(capsys, *argv)
        assert status == 2 and len(out.splitlines()) == 1 and said in out, (argv, out)
    assert (path.read_bytes() if path.is_file() else None) == before
    assert not (course / "exercises" / "rmsnorm.py").exists() and not backups(course, "vector_add")


@pytest.mark.parametrize("read_only", ["file", "folder"])
def test_a_read_only_exercise_or_folder_is_one_line_and_nothing_is_written(course, capsys, read_only):
    mine = fill(course, "vector_add") + "# my note\n"       # drifted: make-exercises would back it up and rewrite
    path = course / "exercises" / "vector_add.py"
    path.write_text(mine)
    locked = path if read_only == "file" else path.parent
    mode = locked.stat().st_mode
    locked.chmod(mode & ~0o222)
    try:
        status, out = make_exercises(capsys)
    finally:
        locked.chmod(mode)
    assert status == 2 and len(out.splitlines()) == 1, out
    assert "vector_add" in out and "read-only" in out and "nothing was written" in out
    assert path.read_text() == mine and not backups(course, "vector_add")
    assert not [p for p in (course / "exercises").iterdir() if p.name.endswith(".tmp")]


def test_writes_are_atomic_and_keep_the_files_permissions(course, capsys):
    mine = fill(course, "vector_add") + "# my note\n"
    path = course / "exercises" / "vector_add.py"
    path.write_text(mine)
    path.chmod(0o640)
    assert make_exercises(capsys)[0] == 0
    assert path.read_text() == mine[:-len("# my note\n")] and path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (course / "exercises").iterdir() if not p.name.endswith(".bak")) == \
        ["rmsnorm.py", "vector_add.py"]                      # no temporary file left behind


@pytest.mark.parametrize("saved", ["byte-order mark", "CRLF", "both"])
def test_an_exercise_saved_with_a_bom_or_crlf_is_the_same_exercise(course, capsys, saved):
    text = fill(course, "vector_add")
    data = text.replace("\n", "\r\n").encode() if saved != "byte-order mark" else text.encode()
    data = b"\xef\xbb\xbf" + data if saved != "CRLF" else data
    path = course / "exercises" / "vector_add.py"
    path.write_bytes(data)
    assert make_exercises(capsys) == (0, "exercises/ already matches solutions/\n")
    assert make_exercises(capsys, "--check")[0] == 0
    assert path.read_bytes() == data and not backups(course, "vector_add")


@pytest.mark.parametrize("odd", ["latin-1", "fifo", "directory"])
def test_a_solution_that_cannot_be_read_is_one_line_and_nothing_is_written(course, capsys, odd):
    bad = course / "solutions" / "zz_odd.py"
    if odd == "latin-1":
        bad.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    elif odd == "fifo":
        os.mkfifo(bad)
    else:
        bad.mkdir()
    (course / "exercises" / "rmsnorm.py").unlink()
    for argv in ((), ("--check",)):
        status, out = make_exercises(capsys, *argv)
        assert status == 2 and len(out.splitlines()) == 1 and "solutions/zz_odd.py" in out, out
    assert not (course / "exercises" / "rmsnorm.py").exists()


def test_a_full_disk_or_ctrl_c_midway_names_the_file_and_what_was_written(course, capsys, monkeypatch):
    for family in ("rmsnorm", "vector_add"):
        (course / "exercises" / f"{family}.py").unlink()
    replace, calls = os.replace, []

    def full_on_the_second(src, dst, *args, **kwargs):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_on_the_second)
    status, out = make_exercises(capsys)
    assert status == 2 and len(out.splitlines()) == 1, out
    assert "vector_add.py cannot be written: No space left on device" in out
    assert "written before it: wrote exercises/rmsnorm.py (new)" in out
    assert sorted(p.name for p in (course / "exercises").iterdir()) == ["rmsnorm.py"]     # no temporary file
    monkeypatch.setattr(os, "replace", replace)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(exercise_files.safe_files, "atomic_write_text", interrupted)
    status, out = make_exercises(capsys)
    assert status == 130 and len(out.splitlines()) == 1 and "make-exercises interrupted" in out, out


def test_an_exercise_saved_while_make_exercises_runs_is_kept_as_saved(course, capsys, monkeypatch):
    path = course / "exercises" / "vector_add.py"
    stub = path.read_text()
    mine = fill(course, "vector_add")
    path.write_text(stub + "\n")                             # a stub: make-exercises would regenerate it
    (course / "exercises" / "rmsnorm.py").unlink()
    checked = exercise_files.safe_files.check_writable

    def save_then_check(target, root):     # the learner saves a filled-in exercise after it was read
        if target == path:
            path.write_text(mine)
        return checked(target, root)

    monkeypatch.setattr(exercise_files.safe_files, "check_writable", save_then_check)
    status, out = make_exercises(capsys)
    assert status == 2 and len(out.splitlines()) == 1, out
    assert "exercises/vector_add.py changed while make-exercises ran" in out and "wrote exercises/rmsnorm.py" in out
    assert path.read_text() == mine and (course / "exercises" / "rmsnorm.py").exists()
