"""The learner's check never crashes and never lies, whatever the exercise file holds: a module that does
not import, a kernel that exits, loops or strays past a tensor inside a helper is that slot's FAIL naming
the file and the learner's line (exit 1, no traceback); a file that is not Python source at all (a
directory, bytes that are not UTF-8) is one line naming it (exit 2); `progress` reports a broken slot
and goes on with the others. Each exercise is a filled-in copy of its solution with one edit, in a
course root of the test's own."""
import os
import threading
import time

import pytest

from planted import Bug, copy_solutions, planted_text
from tritonllm_course import cli, slots
from tritonllm_course.checking import TimedOut, check, time_limit
from tritonllm_course.runtime import runtime

pytestmark = pytest.mark.needs_solutions   # the exercises are copies of solutions/
# an exit, an endless loop or a stray access inside a kernel: on a GPU the first does not compile and the
# others hang or fault the device (and with it every later test of the process)
interpreter_only = pytest.mark.skipif(not runtime().interpreted, reason="a kernel that hangs or faults a GPU")

CHECK = ["check", "ln1", "--trials", "1", "--dtype", "float32"]


@pytest.fixture(autouse=True)
def _as_a_learner(monkeypatch):
    """The kernels as a learner's check picks them: the exercise when it is filled in."""
    monkeypatch.setenv("TRITONLLM_KERNELS", "auto")
KERNEL_LINE = "    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)"


def _exercise(root, family="rmsnorm", edit=None) -> tuple:
    """Write solutions/<family>.py and a filled-in exercises/<family>.py under `root`, the exercise's text
    passed through `edit` (str -> str or bytes). Returns (path, its text before `edit`)."""
    text = planted_text(Bug("-", family, "-", ()))
    copy_solutions(root)
    path = root / "exercises" / f"{family}.py"
    new = edit(text) if edit else text
    (path.write_bytes if isinstance(new, bytes) else path.write_text)(new)
    return path, text


def _line_of(text: str, snippet: str) -> int:
    return text[:text.index(snippet)].count("\n") + 1


def _run(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _in_region(code: str):
    """An edit that puts `code` (one or more lines at the kernel's indentation) first in the kernel's region."""
    return lambda text: text.replace(KERNEL_LINE, code + "\n" + KERNEL_LINE, 1)


def _assert_one_fail(rc, out, err, *needles):
    assert rc == 1, (rc, out, err)
    assert out.startswith("[FAIL] ln1 (exercises)"), out
    assert "Traceback" not in out + err, out + err
    for needle in needles:
        assert needle in out, (needle, out)


def _guard_the_process(monkeypatch):
    """Should the check let the learner's os._exit through, it raises here (no SystemExit, so the test fails)
    instead of ending the test process with status 0."""
    def reached(code=0):
        raise RuntimeError(f"os._exit({code}) reached the process")
    monkeypatch.setattr(os, "_exit", reached)


@interpreter_only
@pytest.mark.parametrize("code", ["    raise SystemExit(0)", "    import sys\n    sys.exit(0)",
                                  "    import os\n    os._exit(0)"])     # ends a process at once, status 0
def test_an_exit_in_the_kernel_is_a_fail_not_a_pass(code, course_copy, capsys, monkeypatch):
    _guard_the_process(monkeypatch)
    _, text = _exercise(course_copy, edit=_in_region(code))
    line = _line_of(text, KERNEL_LINE) + code.count("\n")
    rc, out, err = _run(CHECK, capsys)
    _assert_one_fail(rc, out, err, "SystemExit", f"exercises/rmsnorm.py:{line}")


@pytest.mark.parametrize("module", ["sys", "os"])
def test_an_exit_at_module_level_is_a_fail(module, course_copy, capsys, monkeypatch):
    _guard_the_process(monkeypatch)
    exit_call = "sys.exit(0)" if module == "sys" else "os._exit(0)"
    path, text = _exercise(course_copy, edit=lambda t: t + f"\nimport {module}\n{exit_call}\n")
    rc, out, err = _run(CHECK, capsys)
    _assert_one_fail(rc, out, err, f"exercises/rmsnorm.py:{text.count(chr(10)) + 3}", exit_call, "calls exit (0)")


@interpreter_only
def test_a_kernel_that_never_returns_times_out(course_copy, capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_CHECK_TIMEOUT", "1")
    _, text = _exercise(course_copy, edit=_in_region("    while True:\n        pass"))
    start = time.monotonic()
    rc, out, err = _run(CHECK, capsys)
    loop = _line_of(text, KERNEL_LINE)
    _assert_one_fail(rc, out, err, "timed out after 1 s", "the check stopped", "(at exercises/rmsnorm.py:")
    assert f"rmsnorm.py:{loop}: while True:" in out or f"rmsnorm.py:{loop + 1}: pass" in out, out
    assert out.count("timed out after 1 s:") == 1, out   # the check stops at the first case that hangs
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("value", ["soon", "-1", "inf", "nan"])
def test_a_bad_time_limit_is_one_line_and_exit_2(value, course_copy, capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_CHECK_TIMEOUT", value)
    _exercise(course_copy)
    rc, out, err = _run(CHECK, capsys)
    assert rc == 2 and not out and err.strip() == (f"TRITONLLM_CHECK_TIMEOUT must be a number of seconds >= 0, "
                                                   f"got {value!r}"), (rc, out, err)


def test_a_module_level_loop_times_out(course_copy, capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_CHECK_TIMEOUT", "1")
    _exercise(course_copy, edit=lambda t: t + "\nwhile True:\n    pass\n")
    rc, out, err = _run(CHECK, capsys)
    _assert_one_fail(rc, out, err, "importing rmsnorm.py timed out after 1 s")


def test_the_time_limit_works_outside_the_main_thread():
    caught = []

    def spin():
        try:
            with time_limit(0.5):
                while True:
                    pass
        except TimedOut:
            caught.append(True)

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    worker.join(20)
    assert caught == [True]
    with time_limit(5):   # a call that returns in time is left alone, and nothing fires later
        pass
    time.sleep(0.05)


@pytest.mark.parametrize("name, edit, needle", [
    ("syntax", _in_region("    r = = 1"), "SyntaxError: invalid syntax: r = = 1"),
    ("import", lambda t: "import nonexistent_module_xyz\n" + t, "ModuleNotFoundError"),
    ("tabs", lambda t: t.replace(KERNEL_LINE, "\t" + KERNEL_LINE.lstrip(), 1), "TabError"),
    ("raise", lambda t: t + "\nraise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    ("nul", _in_region("    r = 1\0"), "SyntaxError: source code string cannot contain null bytes"),
])
def test_a_module_that_does_not_import_is_a_fail_naming_the_line(name, edit, needle, course_copy, capsys):
    path, _ = _exercise(course_copy, edit=edit)
    line = _line_of(path.read_text(), {"syntax": "r = = 1", "import": "import nonexistent",
                                       "tabs": "\tr = tl", "raise": "raise RuntimeError", "nul": "r = 1\0"}[name])
    rc, out, err = _run(CHECK, capsys)
    _assert_one_fail(rc, out, err, needle, f"exercises/rmsnorm.py:{line}")
    assert len(out.splitlines()) == 2, out   # the verdict and the one problem: no traceback


def test_a_byte_order_mark_is_valid_python_and_passes(course_copy, capsys):
    """Python reads a UTF-8 BOM as the start of the file; a correct kernel behind one is correct."""
    _exercise(course_copy, edit=lambda t: b"\xef\xbb\xbf" + t.encode())
    rc, out, err = _run(CHECK, capsys)
    assert rc == 0 and out.startswith("[PASS] ln1"), out + err


def test_a_symlink_to_a_text_file_is_a_fail(course_copy, capsys):
    _exercise(course_copy)
    notes = course_copy / "notes.txt"
    notes.write_text("hello world, these are my notes\n")
    path = course_copy / "exercises" / "rmsnorm.py"
    path.unlink()
    path.symlink_to(notes)
    rc, out, err = _run(CHECK, capsys)
    _assert_one_fail(rc, out, err, "exercises/rmsnorm.py:1: SyntaxError")


def test_a_missing_function_is_a_fail(course_copy, capsys):
    _exercise(course_copy, edit=lambda t: t.replace("def rms_norm(", "def rms_norm_renamed(", 1))
    rc, out, err = _run(CHECK, capsys)
    _assert_one_fail(rc, out, err, "exercises/rmsnorm.py has no function rms_norm()")


@pytest.mark.parametrize("kind", ["directory", "latin-1", "device"])
def test_a_file_that_is_not_python_source_is_one_line_and_exit_2(kind, course_copy, capsys):
    path, text = _exercise(course_copy)
    if kind == "directory":
        path.unlink()
        path.mkdir()
        needle = "exercises/rmsnorm.py is a directory"
    elif kind == "device":   # reading it would never end
        path.unlink()
        path.symlink_to("/dev/zero")
        needle = "exercises/rmsnorm.py is not a regular file"
    else:
        path.write_bytes(text.replace(KERNEL_LINE, "    # r: la ligne " + "\xe9" + "\n" + KERNEL_LINE)
                         .encode("latin-1"))
        needle = f"exercises/rmsnorm.py:{_line_of(text, KERNEL_LINE)}: not UTF-8 text (byte 0xe9)"
    rc, out, err = _run(CHECK, capsys)
    assert rc == 2 and not out, (rc, out, err)
    assert err.strip().splitlines() == [err.strip()] and needle in err, err


# 10**8 elements past the tensor, far past every argument of the kernel: 10**5 could land inside another one
# (the check then still fails, on the values, but cannot name the access)
@interpreter_only
@pytest.mark.parametrize("family, slot, edit, helper_line, kernel_line", [
    ("conv1d", "conv1d_prefill",
     ("        w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0).to(tl.float32)    # [BLOCK_C]",
      "        w = tl.load(w_ptr + c * K + j + 100000000).to(tl.float32)    # [BLOCK_C]"),
     "w = tl.load(w_ptr + c * K + j + 100000000)", "y = silu(conv_prefill_tile("),
    ("flash_attention", "flash_attention",
     ("    k = tl.load(k_head + offs, mask=kv_mask, other=0.0)", "    k = tl.load(k_head + offs + 100000000)"),
     "k = tl.load(k_head + offs + 100000000)", "_attend("),
])
def test_an_access_past_a_tensor_in_a_helper_names_the_learners_line(family, slot, edit, helper_line, kernel_line,
                                                                     course_copy):
    _, text = _exercise(course_copy, family, edit=lambda t: t.replace(*edit, 1))
    report = check(slot, "exercises", dtype="float32", trials=1, fail_fast=True, verbose=False)
    edited = text.replace(*edit, 1)
    assert not report.passed
    problem = report.cases[-1].problems[0]
    assert problem.startswith("out-of-bounds memory access: kernel "), problem
    assert "InterpreterError" not in problem, problem
    assert f"(at exercises/{family}.py:{_line_of(edited, helper_line)}: " in problem, problem
    assert f"called from exercises/{family}.py:" in problem and kernel_line in edited, problem


def test_progress_reports_a_broken_slot_and_goes_on(course_copy, capsys):
    _exercise(course_copy, edit=_in_region("    r = = 1"))
    _exercise(course_copy, "residual")
    rc, out, err = _run(["progress"], capsys)
    assert rc == 0 and "Traceback" not in out + err, out + err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert len(rows) == len(slots.all_slots()), out        # every slot has its row
    for name in ("ln1", "ln2", "qk_norm"):
        assert "FAIL: exercises/rmsnorm.py:" in rows[name] and "SyntaxError" in rows[name], rows[name]
    for name in ("attn_residual", "mlp_residual"):
        assert rows[name].rstrip().endswith("pass"), rows[name]


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t.replace("    # END EXERCISE\n", "", 1), "BEGIN without END"),
    (_in_region("    # BEGIN EXERCISE"), "BEGIN inside the region"),
])
def test_progress_without_running_reports_broken_markers_and_goes_on(edit, needle, course_copy, capsys):
    _exercise(course_copy, edit=edit)
    _exercise(course_copy, "residual")
    rc, out, err = _run(["progress", "--no-run"], capsys)
    assert rc == 2 and "Traceback" not in out + err, out + err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert len(rows) == len(slots.all_slots()), out
    assert needle in rows["ln1"] and "rmsnorm.py" in rows["ln1"], rows["ln1"]
    assert "filled" in rows["attn_residual"], rows["attn_residual"]


def test_progress_names_a_directory_in_place_of_an_exercise(course_copy, capsys):
    path, _ = _exercise(course_copy)
    path.unlink()
    path.mkdir()
    _exercise(course_copy, "residual")
    rc, out, err = _run(["progress"], capsys)
    assert rc == 2 and "Traceback" not in out + err, out + err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "exercises/rmsnorm.py is a directory" in rows["ln1"], rows["ln1"]
    assert rows["attn_residual"].rstrip().endswith("pass"), rows["attn_residual"]


def test_progress_names_a_file_in_place_of_the_exercises_folder(course_copy, capsys):
    """No exercise can be there: every row an error naming the file and exit 2, not every slot "to do"."""
    (course_copy / "exercises").rmdir()
    (course_copy / "exercises").write_text("a file\n")
    rc, out, err = _run(["progress", "--no-run"], capsys)
    assert rc == 2 and "Traceback" not in out + err, out + err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "exercises is a file, not a folder" in rows["ln1"] and "to do" not in out, rows["ln1"]


@interpreter_only
def test_an_error_in_a_helper_names_the_error_and_the_learners_line(course_copy):
    line = "        w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0).to(tl.float32)    # [BLOCK_C]"
    _, text = _exercise(course_copy, "conv1d", edit=lambda t: t.replace(line, line + "\n        w = w * scale_xyz", 1))
    report = check("conv1d_prefill", "exercises", dtype="float32", trials=1, fail_fast=True, verbose=False)
    problem = report.cases[-1].problems[0]
    assert problem.startswith("the kernel raised NameError: "), problem
    assert f"(at exercises/conv1d.py:{_line_of(text, line) + 1}: w = w * scale_xyz, called from " in problem, problem


def test_after_a_lost_gpu_every_later_check_says_so_and_runs_nothing(rt, monkeypatch):
    """After a fault or a time-out on a GPU the CUDA context is lost (or still busy): a later check that
    touched it would fail with a traceback or wait forever."""
    import dataclasses

    from tritonllm_course import checking

    on_a_gpu = dataclasses.replace(rt, mode="gpu", device="cuda")
    assert not on_a_gpu.interpreted
    monkeypatch.setattr(checking, "runtime", lambda: on_a_gpu)
    monkeypatch.setattr(checking, "_gpu_lost", "ln1's kernel may still be running on the GPU")
    report = check("ln2", "solutions", verbose=False)
    assert not report.passed and not report.cases, report
    assert "not run: ln1's kernel may still be running on the GPU" in str(report), report
