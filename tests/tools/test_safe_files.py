"""Files the tools write (`tritonllm_course.safe_files`): never through a symbolic link, never outside their
folder, atomically, a read-only file left alone; `sync-notebooks` checks every chapter before it rewrites
any and refuses a student version; the benchmarks write their results the same way."""
import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from tritonllm_course import cli, safe_files
from tritonllm_course.colab import SETUP_CELL
from tritonllm_course.safe_files import UnsafeWrite, atomic_write_bytes, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_new_file_and_a_replaced_one(tmp_path):
    path = atomic_write_text(tmp_path / "sub" / "a.txt", "one\n", tmp_path)
    assert path.read_text() == "one\n" and path.stat().st_mode & 0o777 == 0o666 & ~safe_files.umask()
    path.chmod(0o640)
    atomic_write_text(path, "two\n", tmp_path)
    assert path.read_text() == "two\n" and path.stat().st_mode & 0o777 == 0o640       # its mode kept
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\xff", tmp_path, mode=0o755)
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff" and (tmp_path / "b.bin").stat().st_mode & 0o777 == 0o755
    assert not leftovers(tmp_path) and not leftovers(tmp_path / "sub")


def test_a_link_is_never_written_through(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "target.txt").write_text("precious\n")
    (root / "link.txt").symlink_to(outside / "target.txt")
    (root / "linked_dir").symlink_to(outside)
    for path in (root / "link.txt", root / "linked_dir" / "target.txt", root / "linked_dir" / "new.txt"):
        with pytest.raises(UnsafeWrite, match="is a symbolic link"):
            atomic_write_text(path, "overwritten\n", root)
    assert (outside / "target.txt").read_text() == "precious\n" and sorted(os.listdir(outside)) == ["target.txt"]
    assert (root / "link.txt").is_symlink()
    with pytest.raises(UnsafeWrite, match="is a symbolic link"):    # the file alone, in its own folder
        atomic_write_text(root / "link.txt", "overwritten\n")


def test_outside_its_folder_a_directory_or_dot_dot_is_refused(tmp_path):
    root = tmp_path / "root"
    (root / "folder").mkdir(parents=True)
    (root / "file").write_text("")
    cases = {tmp_path / "elsewhere.txt": "is outside", root / "folder": "is a directory",
             root / "folder" / ".." / ".." / "escape.txt": "'..'", root: "is the folder",
             root / "file" / "below.txt": "is not a directory"}
    for path, said in cases.items():
        with pytest.raises(UnsafeWrite, match=re.escape(said)):
            atomic_write_text(path, "x", root)
    assert not (tmp_path / "elsewhere.txt").exists() and not (tmp_path / "escape.txt").exists()
    # with no root, the folder as named may go up ('--out ../results'): only the file itself is checked
    (root / "folder" / "deeper").mkdir()
    atomic_write_text(root / "folder" / "deeper" / ".." / "up.txt", "ok\n")
    assert (root / "folder" / "up.txt").read_text() == "ok\n"


def test_a_read_only_file_or_folder_is_left_alone(tmp_path):
    path = tmp_path / "locked.txt"
    path.write_text("mine\n")
    path.chmod(0o444)
    with pytest.raises(UnsafeWrite, match="is read-only"):
        atomic_write_text(path, "theirs\n", tmp_path)
    assert path.read_text() == "mine\n"
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        for path in (folder / "new.txt", folder / "to_be_made" / "new.txt"):
            with pytest.raises(UnsafeWrite, match=f"its folder {folder} is read-only"):
                atomic_write_text(path, "x", tmp_path)
    finally:
        folder.chmod(0o755)
    assert not list(folder.iterdir())


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("old\n")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(safe_files.os, "replace", full_disk)
    with pytest.raises(UnsafeWrite, match="a.txt cannot be written: No space left on device"):
        atomic_write_text(path, "new\n", tmp_path)
    assert path.read_text() == "old\n" and not leftovers(tmp_path)


def test_bad_arguments_name_themselves(tmp_path):
    with pytest.raises(TypeError, match="text must be a str"):
        atomic_write_text(tmp_path / "a", b"bytes", tmp_path)
    with pytest.raises(TypeError, match="data must be bytes"):
        atomic_write_bytes(tmp_path / "a", "text", tmp_path)


def test_a_figure_is_saved_the_same_way(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure()
    (tmp_path / "plot.png").symlink_to(tmp_path / "elsewhere.png")
    with pytest.raises(UnsafeWrite, match="symbolic link"):
        safe_files.save_figure(fig, tmp_path / "plot.png")
    path = safe_files.save_figure(fig, tmp_path / "real.png", dpi=20)
    plt.close(fig)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "elsewhere.png").exists()


def test_the_benchmarks_write_their_results_through_safe_files(tmp_path):
    from tritonllm_course.measure.benchmark import save_results
    (tmp_path / "results.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(UnsafeWrite, match="symbolic link"):
        save_results([], tmp_path / "results.json")
    assert json.loads(save_results([], tmp_path / "new.json").read_text()) == []
    # no other way of writing a file is left in the code that writes results
    raw = re.compile(r"\.write_text\(|\.write_bytes\(|\.savefig\(|open\([^)]*['\"][wa]b?['\"]|json\.dump\(")
    sources = sorted((ROOT / "tritonllm_course" / "measure").glob("*.py"))     # engine_bench.py among them
    found = [f"{p.name}:{i}: {line.strip()}" for p in sources for i, line in enumerate(p.read_text().splitlines(), 1)
             if raw.search(line) and "print(json.dumps" not in line and not line.lstrip().startswith("#")]
    assert not found, "\n".join(found)


@pytest.fixture
def chapters(course_copy):
    """Two chapters of a scratch course: 01 with a learner's first cell and an output, 02 plain."""
    (course_copy / "notebooks").mkdir()
    paths = []
    for n in (1, 2):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("my own set-up"), nbformat.v4.new_code_cell("x = 2")]
        nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="2\n")]
        paths.append(course_copy / "notebooks" / f"0{n}_chapter.ipynb")
        nbformat.write(nb, paths[-1])
    return paths


def sync(capsys) -> tuple[int, str]:
    status = cli.main(["sync-notebooks"])
    out, err = capsys.readouterr()
    return status, out + err


@pytest.mark.parametrize("odd", ["not JSON", "no code cell", "a link", "a directory", "a fifo"])
def test_sync_notebooks_checks_every_chapter_before_it_rewrites_any(chapters, capsys, odd, tmp_path_factory):
    bad = chapters[0].parent / "05_broken.ipynb"
    if odd == "not JSON":
        bad.write_text("{ not json")
    elif odd == "no code cell":
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell("# text only")]
        nbformat.write(nb, bad)
    elif odd == "a link":
        target = tmp_path_factory.mktemp("outside") / "nb.ipynb"
        target.write_text(chapters[1].read_text())
        bad.symlink_to(target)
    elif odd == "a fifo":                                                # read, it would block forever
        os.mkfifo(bad)
    else:
        bad.mkdir()
    before = [p.read_bytes() for p in chapters]
    status, out = sync(capsys)
    assert status == 2 and len(out.splitlines()) == 1 and "05_broken.ipynb" in out, out
    assert [p.read_bytes() for p in chapters] == before                # 01 and 02 come first: still as they were
    if odd == "a link":
        assert target.read_text() == chapters[1].read_text()


def test_sync_notebooks_rewrites_an_instructors_chapters_and_refuses_a_student_version(chapters, capsys):
    status, out = sync(capsys)
    assert status == 0 and out.count("synced") == 2
    nb = nbformat.read(chapters[0], as_version=4)
    assert nb.cells[0].source == SETUP_CELL and not nb.cells[1].outputs
    mine = chapters[0].read_text().replace(SETUP_CELL.splitlines()[0], "# my own edit")
    chapters[0].write_text(mine)
    (chapters[0].parents[1] / "solutions").rmdir()                      # a learner's copy
    status, out = sync(capsys)
    assert status == 2 and "has no solutions/ (a student version)" in out and len(out.splitlines()) == 1
    assert chapters[0].read_text() == mine


def test_odd_names_odd_targets_and_odd_arguments_are_refused_by_name(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    long_name = root / ("a" * 255)                      # the longest name a file may have: its temporary file fits
    assert atomic_write_text(long_name, "x", root).read_text() == "x"
    os.mkfifo(root / "fifo")
    cases = {root / ("b" * 256): "File name too long", root / "nul\0byte": "NUL byte",
             root / "fifo": "is a fifo, not a regular file"}
    for path, said in cases.items():
        with pytest.raises(UnsafeWrite, match=re.escape(said)):
            atomic_write_text(path, "x", root)
    assert (root / "fifo").is_fifo()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")              # a root, or a results folder, that loops
    for args in ((tmp_path / "loop" / "a.txt", "x", tmp_path / "loop"), (tmp_path / "loop" / "a.txt", "x")):
        with pytest.raises(UnsafeWrite, match="a.txt cannot be written: a loop of symbolic links"):
            atomic_write_text(*args)
    with pytest.raises(UnsafeWrite, match=r"s\.txt: its text cannot be written as utf-8"):
        atomic_write_text(root / "s.txt", "\udcff", root)
    with pytest.raises(TypeError, match="path must be a str or a path, got NoneType"):
        atomic_write_text(None, "x", root)
    with pytest.raises(ValueError, match="mode must be permission bits"):
        atomic_write_bytes(root / "m", b"x", root, mode=0o4755)
    with pytest.raises(ValueError, match="encoding 'nope'"):
        atomic_write_text(root / "e.txt", "x", root, encoding="nope")
    assert sorted(os.listdir(root)) == [long_name.name, "fifo"]      # nothing else written, no temporary file


def test_read_regular_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    (tmp_path / "file").write_bytes(b"data")
    os.mkfifo(tmp_path / "fifo")                      # opened for reading, a fifo with no writer blocks forever
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert safe_files.read_regular(tmp_path / "file") == b"data" == safe_files.read_regular(tmp_path / "link")
    for name, said in {"fifo": "is a fifo", "dir": "is a directory", "missing": "No such file",
                       "link": "is a symbolic link"}.items():
        with pytest.raises(safe_files.UnreadableFile, match=re.escape(f"{tmp_path / name} ")):
            safe_files.read_regular(tmp_path / name, follow_links=False)
        with pytest.raises(safe_files.UnreadableFile, match=said):
            safe_files.read_regular(tmp_path / name, follow_links=False)


def test_ctrl_c_during_a_write_is_held_until_the_file_is_whole(tmp_path, monkeypatch):
    import signal
    real_fsync = os.fsync

    def interrupted_fsync(fd):        # Ctrl-C lands between the data and the rename
        signal.raise_signal(signal.SIGINT)   # to this thread: delivered before raise_signal returns
        real_fsync(fd)

    (tmp_path / "a.txt").write_text("old\n")
    monkeypatch.setattr(os, "fsync", interrupted_fsync)
    # Python's own Ctrl-C handler, whatever an earlier test in this worker left installed (an ignored SIGINT
    # would make the held interrupt vanish, which is what the tool must do for a caller that ignores it)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write_text(tmp_path / "a.txt", "new\n", tmp_path)
    finally:
        signal.signal(signal.SIGINT, before)
    assert (tmp_path / "a.txt").read_text() == "new\n" and not leftovers(tmp_path)


class Terminated(Exception):
    """What the pinned SIGTERM handler below raises."""


def test_sigterm_during_a_write_is_held_until_the_file_is_whole(tmp_path, monkeypatch):
    import signal
    real_fsync, seen = os.fsync, []

    def terminated_fsync(fd):         # `kill` lands between the data and the rename
        signal.raise_signal(signal.SIGTERM)  # to this thread: caught before raise_signal returns
        seen.append(os.listdir(tmp_path))    # held: on_term has not run, the temporary file is still there
        real_fsync(fd)

    def on_term(signum, frame):       # a Python handler, pinned: whatever the worker had installed is set aside
        raise Terminated(signum)

    (tmp_path / "a.txt").write_text("old\n")
    monkeypatch.setattr(os, "fsync", terminated_fsync)
    before = signal.signal(signal.SIGTERM, on_term)
    try:
        with pytest.raises(Terminated):
            atomic_write_text(tmp_path / "a.txt", "new\n", tmp_path)
        assert signal.getsignal(signal.SIGTERM) is on_term        # the caller's handler back in place
    finally:
        signal.signal(signal.SIGTERM, before)
    assert len(seen) == 1 and any(name.endswith(".tmp") for name in seen[0])
    assert (tmp_path / "a.txt").read_text() == "new\n" and not leftovers(tmp_path)


def test_sigterm_at_its_default_ends_the_process_once_the_file_is_whole(tmp_path):
    """The default action (the process ends by SIGTERM) is carried out after the write, not in its middle."""
    import signal
    import subprocess
    import sys
    script = (
        "import os, signal, sys\n"
        "from tritonllm_course.safe_files import atomic_write_text\n"
        "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
        "real = os.fsync\n"
        "os.fsync = lambda fd: (signal.raise_signal(signal.SIGTERM), real(fd))\n"
        "atomic_write_text(sys.argv[1], 'new\\n', sys.argv[2])\n"
        "print('not ended')\n")
    (tmp_path / "a.txt").write_text("old\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(safe_files.__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.txt"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == -signal.SIGTERM and "not ended" not in done.stdout, (done.returncode, done.stderr)
    assert (tmp_path / "a.txt").read_text() == "new\n" and not leftovers(tmp_path)


def test_a_chapter_saved_while_the_chapters_are_synced_is_kept_as_saved(chapters, capsys, monkeypatch):
    from tritonllm_course import notebooks_tools
    saved = chapters[0].read_text().replace("my own set-up", "saved in Jupyter meanwhile")
    checked = notebooks_tools.safe_files.check_writable

    def save_then_check(path, root):   # the learner saves 01_triton_basics after it was read, before it is written
        if path == chapters[0]:
            chapters[0].write_text(saved)
        return checked(path, root)

    monkeypatch.setattr(notebooks_tools.safe_files, "check_writable", save_then_check)
    status, out = sync(capsys)
    assert status == 2 and len(out.splitlines()) == 1 and "notebooks/01_chapter.ipynb changed while" in out, out
    assert chapters[0].read_text() == saved                                   # as the learner saved it
    assert nbformat.read(chapters[1], as_version=4).cells[0].source == SETUP_CELL   # the other one synced


def test_a_folder_swapped_for_a_link_after_the_check_is_not_written_through(tmp_path, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    checked = safe_files.check_writable

    def check_then_swap(path, folder):      # another program replaces sub/ by a link once the check has passed
        real = checked(path, folder)
        (root / "sub").rmdir()
        (root / "sub").symlink_to(outside)
        return real

    monkeypatch.setattr(safe_files, "check_writable", check_then_swap)
    with pytest.raises(UnsafeWrite, match="sub became a symbolic link or a file while"):
        atomic_write_text(root / "sub" / "a.txt", "x", root)
    assert os.listdir(outside) == []


def test_a_root_spelled_with_dot_dot_is_the_callers_choice_below_it_is_refused(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "course").mkdir()
    root = tmp_path / "a" / ".." / "course"                   # TRITONLLM_COURSE_ROOT=/x/a/../course, say
    assert atomic_write_text(root / "exercises" / "e.py", "x", root) == tmp_path / "course" / "exercises" / "e.py"
    with pytest.raises(UnsafeWrite, match="'..'"):
        atomic_write_text(root / "exercises" / ".." / ".." / "out.py", "x", root)
    monkeypatch.chdir(tmp_path / "course")                    # a relative root, a relative path
    assert atomic_write_text(Path("exercises") / "f.py", "y", ".") == tmp_path / "course" / "exercises" / "f.py"
    with pytest.raises(UnsafeWrite, match="is outside"):
        atomic_write_text(tmp_path / "elsewhere.txt", "x", ".")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "course"]


def test_ctrl_c_during_sync_notebooks_is_one_line_and_each_chapter_whole(chapters, capsys, monkeypatch):
    from tritonllm_course import notebooks_tools
    written = notebooks_tools.safe_files.atomic_write_text

    def interrupted_on_the_second(path, *args, **kwargs):
        if path == chapters[1]:
            raise KeyboardInterrupt
        return written(path, *args, **kwargs)

    second = chapters[1].read_bytes()
    monkeypatch.setattr(notebooks_tools.safe_files, "atomic_write_text", interrupted_on_the_second)
    status, out = sync(capsys)
    assert status == 130 and len(out.splitlines()) == 1 and "sync-notebooks interrupted" in out, out
    assert nbformat.read(chapters[0], as_version=4).cells[0].source == SETUP_CELL and chapters[1].read_bytes() == second


def test_a_results_folder_in_the_way_of_a_benchmark_is_one_line_before_any_work(tmp_path):
    """A benchmark's --out that is a file, lies under one, or is a link to nothing: exit 2, one line naming it,
    before the GPU is looked for (so on a CPU too); nothing is made."""
    import subprocess
    import sys
    (tmp_path / "afile").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    for out in (tmp_path / "afile", tmp_path / "afile" / "sub", tmp_path / "dangling"):
        r = subprocess.run([sys.executable, "-m", "tritonllm_course.measure.flash_bench", "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--out" in r.stderr, (out, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "dangling"]
    from tritonllm_course.safe_files import UnsafeWrite, results_folder
    assert results_folder(tmp_path / "new" / "deep").is_dir()
    with pytest.raises(UnsafeWrite, match="not a directory"):
        results_folder(tmp_path / "afile")
