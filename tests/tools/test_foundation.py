"""The course's machinery: runtime, checks that can fail, the exercise pipeline, set-up files."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tritonllm_course import cli, kernels, regions
from tritonllm_course.checking import check, check_fn
from tritonllm_course.colab import SETUP_CELL
from tritonllm_course.notebooks_tools import first_code_cell, notebooks

ROOT = Path(__file__).resolve().parents[2]
SOLUTION_PATH = ROOT / "solutions" / "vector_add.py"
SOLUTION = SOLUTION_PATH.read_text() if SOLUTION_PATH.exists() else ""   # "": a student version


def test_runtime_summary(rt):
    assert rt.mode in ("gpu", "interpreter")
    line = rt.summary()
    assert f"mode={rt.mode}" in line and "triton" in line and "torch" in line
    if rt.interpreted:
        import os
        assert os.environ["TRITON_INTERPRET"] == "1" and rt.dtype == torch.float32


# --- checks fail on wrong kernels -------------------------------------------------------------------
def _vector_inputs(shape, dtype, device, gen):
    return {"x": torch.randn(shape["n"], dtype=dtype, device=device, generator=gen),
            "y": torch.randn(shape["n"], dtype=dtype, device=device, generator=gen)}


def _out(inp):
    return {"out": torch.empty_like(inp["x"])}


def test_check_passes_the_solution(rt):
    report = check("vector_add", "solutions", verbose=False)
    # x + y is exact in fp64; the only error left is the rounding of the output dtype
    assert report.passed and all(max(c.errors) < c.tol / 2 for c in report.cases), report


def test_check_catches_an_unwritten_tail(rt):
    """A grid one block short leaves the tail unwritten: the NaN poison shows it."""
    add_kernel = kernels.load("vector_add", "solutions").module.add_kernel   # the course's (a student's: theirs)

    def short_grid(x, y, out):
        add_kernel[(x.numel() // 256,)](x, y, out, x.numel(), BLOCK_SIZE=256)

    report = check_fn(short_grid, lambda x, y: x + y, _vector_inputs, _out, shape={"n": 1000}, name="short")
    assert not report.passed
    assert "NaN" in str(report) and "FAIL" in str(report)


def test_a_gpu_fault_is_the_verdict_and_stops_the_check(rt, monkeypatch):
    """A CUDA fault (an illegal address) leaves the context unusable: the check reports it on the case
    that raised it, says how to go on, and runs nothing more."""
    from tritonllm_course import checking

    calls = []

    def faulting(fn, kwargs):
        calls.append(1)
        return checking._gpu_fault(RuntimeError("CUDA error: an illegal memory access was encountered"))

    monkeypatch.setattr(checking, "_call", faulting)
    monkeypatch.setattr(checking, "_gpu_lost", None)   # the lost context is this test's: undone after it
    report = check("vector_add", "solutions", verbose=False)
    assert not report.passed and len(calls) == 1 and len(report.cases) == 1, report
    text = str(report)
    assert "faulted on the GPU" in text and "restart the Python kernel" in text and "TRITONLLM_FORCE_CPU=1" in text
    if not rt.interpreted:   # on a GPU every later check says so and runs nothing
        later = check("vector_add", "solutions", verbose=False)
        assert len(calls) == 1 and not later.cases and "until the Python kernel restarts" in str(later), later


def test_check_catches_wrong_math_and_ignored_out(rt):
    report = check_fn(lambda x, y, out: out.copy_(x - y), lambda x, y: x + y, _vector_inputs, _out,
                      shape={"n": 33})
    assert not report.passed and report.max_error > 0.1
    report = check_fn(lambda x, y, out: x + y, lambda x, y: x + y, _vector_inputs, _out, shape={"n": 33})
    assert not report.passed, "a kernel that ignores out= must not pass"


def test_fresh_inputs_each_trial(rt):
    seen = []
    def make(shape, dtype, device, gen):
        inp = _vector_inputs(shape, dtype, device, gen)
        seen.append(inp["x"].clone())
        return inp
    check_fn(lambda x, y, out: out.copy_(x + y), lambda x, y: x + y, make, _out, shape={"n": 8}, trials=3)
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])


# --- the exercise pipeline --------------------------------------------------------------------------
@pytest.mark.needs_solutions
def test_exercise_generation_round_trip():
    ex = regions.make_exercise(SOLUTION, "vector_add")
    assert "BEGIN SOLUTION" not in ex and "tl.store" not in ex
    assert regions.mask(ex) == regions.mask(SOLUTION)
    assert all(r.unfilled for r in regions.regions(ex))


def test_unbalanced_markers_are_errors():
    with pytest.raises(regions.RegionError, match="without END"):
        regions.regions("    # BEGIN SOLUTION\n    x = 1\n")
    with pytest.raises(regions.RegionError, match="END without BEGIN"):
        regions.regions("x = 1\n# END SOLUTION\n")


def test_committed_exercises_match_solutions():
    assert cli.drifted() == []


@pytest.mark.needs_solutions
def test_drift_is_detected_but_filled_regions_are_not_drift(course_copy):
    (course_copy / "solutions" / "vector_add.py").write_text(SOLUTION)
    ex = regions.make_exercise(SOLUTION, "vector_add")
    filled = ex.replace('raise NotImplementedError', 'pass  # my attempt\n    # raise NotImplementedError', 1)
    (course_copy / "exercises" / "vector_add.py").write_text(filled)
    assert cli.drifted() == []
    (course_copy / "exercises" / "vector_add.py").write_text(ex.replace("block_size: int = 1024",
                                                                        "block_size: int = 512"))
    assert len(cli.drifted()) == 1


@pytest.mark.needs_solutions
def test_unfilled_exercise_reports_not_implemented(course_copy, rt):
    (course_copy / "solutions" / "vector_add.py").write_text(SOLUTION)
    (course_copy / "exercises" / "vector_add.py").write_text(regions.make_exercise(SOLUTION, "vector_add"))
    report = check("vector_add", "exercises", verbose=False)
    assert not report.passed and "not implemented yet" in str(report)
    # auto checks the learner's kernel too: unfilled is never a pass (what follows in a chapter falls
    # back to the solution, and says so)
    report = check("vector_add", "auto", verbose=False)
    assert not report.passed and report.status == "not implemented yet" and "[TODO]" in str(report)
    assert "using the solution" in kernels.load("vector_add", "auto").note
    with pytest.raises(kernels.NotImplementedYet, match="not implemented yet"):
        kernels.load("vector_add", "exercises")


@pytest.mark.needs_solutions
def test_a_wrong_exercise_fails_through_the_cli(course_copy, rt):
    (course_copy / "solutions" / "vector_add.py").write_text(SOLUTION)
    wrong = SOLUTION.replace("x + y, mask=mask", "x - y, mask=mask").replace("BEGIN SOLUTION", "BEGIN EXERCISE") \
                    .replace("END SOLUTION", "END EXERCISE")
    (course_copy / "exercises" / "vector_add.py").write_text(wrong)
    env = {**__import__("os").environ, "TRITONLLM_COURSE_ROOT": str(course_copy)}
    r = subprocess.run([sys.executable, "-m", "tritonllm_course.cli", "check", "vector_add",
                        "--source", "exercises"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[FAIL] vector_add (exercises)" in r.stdout and "tolerance" in r.stdout and "expected" in r.stdout


@pytest.mark.needs_solutions
def test_student_copy_has_no_solutions(tmp_path):
    if not (ROOT / ".git").exists():   # a GPU machine's copy of the tree: student-copy hands out tracked files
        pytest.skip("needs a git checkout of the course")
    dest = tmp_path / "student"
    assert cli.main(["student-copy", str(dest)]) == 0
    assert not (dest / "solutions").exists()
    assert (dest / "exercises" / "vector_add.py").exists() and (dest / "notebooks").is_dir()
    assert regions.unfilled_regions(dest / "exercises" / "vector_add.py")


def test_bad_input_is_named(rt):
    add = kernels.get("vector_add", "add", "solutions")
    x = torch.randn(10)
    with pytest.raises(TypeError, match="y has dtype int64"):
        add(x, torch.arange(10))
    with pytest.raises(ValueError, match=r"y has shape \[11\]"):
        add(x, torch.randn(11))
    with pytest.raises(ValueError, match="contiguous"):
        add(torch.randn(10, 2).t().reshape(2, 10)[0:1].expand(3, 10), torch.randn(3, 10))


# --- set-up files and notebooks ---------------------------------------------------------------------
def _pins(lines):
    return sorted(ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip())


def test_environment_yml_pip_section_equals_requirements():
    req = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env = (ROOT / "environment.yml").read_text().splitlines()
    pip = [ln.strip()[2:] for ln in env if re.match(r"^\s{6}- ", ln)]
    assert _pins(p for p in pip if p != "-e .") == req


def test_notebooks_have_the_standard_first_cell():
    """(That they carry no outputs is tests/tools/test_notebook_metadata.py's: in a learner's folder they may.)"""
    import nbformat
    assert notebooks(), "no chapters found"
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        assert first_code_cell(nb).source == SETUP_CELL, f"{path.name}: run `tritonllm-course sync-notebooks`"


def test_readme_syllabus_lists_every_chapter():
    readme = (ROOT / "README.md").read_text()
    for path in notebooks():
        assert path.name in readme, f"README's syllabus does not list {path.name}"


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("slot", [s for s in __import__("tritonllm_course.slots", fromlist=["x"]).all_slots()
                                  if s.ready], ids=lambda s: s.name)
@pytest.mark.needs_solutions
def test_every_fresh_exercise_reports_not_implemented(slot, course_copy, rt):
    """Each generated exercise, before it is filled in, fails its check with 'not implemented yet'."""
    text = (ROOT / "solutions" / f"{slot.family}.py").read_text()
    (course_copy / "solutions" / f"{slot.family}.py").write_text(text)
    (course_copy / "exercises" / f"{slot.family}.py").write_text(regions.make_exercise(text, slot.family))
    report = check(slot.name, "exercises", verbose=False)
    assert not report.passed and "not implemented yet" in str(report)


TWO_KERNELS = '''import triton


@triton.jit
def first_kernel(x):
    # BEGIN SOLUTION
    pass
    # END SOLUTION


@triton.jit
def second_kernel(x):
    # BEGIN SOLUTION
    pass
    # END SOLUTION


def first(x):
    first_kernel[(1,)](x)


def second(x):
    second_kernel[(1,)](x)
'''


def test_one_kernel_of_a_family_can_be_checked_before_the_others(course_copy):
    (course_copy / "solutions" / "two.py").write_text(TWO_KERNELS)
    ex = regions.make_exercise(TWO_KERNELS, "two")
    head, tail = ex.split("def second_kernel")
    filled_first = head.replace('raise NotImplementedError("exercise two.py, first_kernel: not implemented yet")',
                                "pass") + "def second_kernel" + tail
    assert filled_first != ex
    (course_copy / "exercises" / "two.py").write_text(filled_first)
    assert kernels.exercise_status("two", "first")[0]
    assert not kernels.exercise_status("two", "second")[0]
    assert not kernels.exercise_status("two")[0]
    assert kernels.load("two", "auto", "first").source == "exercises"
    assert kernels.load("two", "auto", "second").source == "solutions"


def test_device_range_names_the_value_and_cpu_tensors_are_always_checked():
    from tritonllm_course import validate
    with pytest.raises(ValueError, match=r"position 9 is outside \[0, 7\]: beyond the cache"):
        validate.device_range(torch.tensor([3, 9]), 0, 7, "position", "beyond the cache")
    with validate.no_device_checks():   # reading a CPU tensor costs no sync: still checked
        with pytest.raises(ValueError, match="position -1"):
            validate.device_range(torch.tensor([-1]), 0, 7, "position")
    validate.device_range(torch.tensor([0, 7]), 0, 7, "position")


def test_token_rows_accepts_column_slices_only():
    from tritonllm_course import validate
    merged = torch.zeros(5, 40)
    validate.token_rows(merged[:, 8:24].view(5, 2, 8), "q")                 # a column slice, as heads
    validate.token_rows(merged[:, 3:4], "b")                                 # one column: no inner stride
    validate.token_rows(torch.zeros(5, 1, 8)[:, :, :8], "k")
    for bad in (merged[:, ::2], torch.zeros(5, 8, 2).transpose(1, 2), merged[:, :16].view(5, 8, 2)[:, :, :1]):
        with pytest.raises(ValueError, match="x must be contiguous within each token"):
            validate.token_rows(bad, "x")


def test_colab_links_come_from_the_one_constant(capsys):
    from tritonllm_course.colab import colab_url
    assert colab_url("01_triton_basics.ipynb", "https://github.com/o/r.git") == \
        "https://colab.research.google.com/github/o/r/blob/main/notebooks/01_triton_basics.ipynb"
    with pytest.raises(ValueError, match="REPO_URL must be a GitHub address"):
        colab_url("01_triton_basics.ipynb", "")
    assert cli.main(["colab-links", "--repo-url", "https://github.com/o/r"]) == 0
    assert "00_setup.ipynb: https://colab.research.google.com/github/o/r/blob/main/notebooks/00_setup.ipynb" \
        in capsys.readouterr().out


# --- the interpreter across triton releases ----------------------------------------------------------
def test_a_block_mask_and_a_condition_on_a_loaded_scalar(rt):
    """`in_row & (pos < n)`, a block `&` a condition on a loaded scalar, is a mask on every triton of the
    window: triton 3.9's interpreter types it as an integer and refuses it unless setup() makes it bool."""
    if not rt.interpreted:
        pytest.skip("the interpreter's masks")
    import triton
    import triton.language as tl

    @triton.jit
    def gather_row(x_ptr, pos_ptr, out_ptr, n, rows, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        pos = tl.load(pos_ptr).to(tl.int64)
        in_row = i < n
        row = tl.load(x_ptr + pos * n + i, mask=in_row & (pos >= 0) & (pos < rows), other=-1.0)
        tl.store(out_ptr + i, row, mask=in_row & (pos != 2))

    x = torch.arange(15.0).reshape(3, 5)
    for pos, want in ((1, x[1].tolist()), (7, [-1.0] * 5), (2, [9.0] * 5)):
        out = torch.full((8,), 9.0)
        gather_row[(1,)](x, torch.tensor([pos]), out, 5, 3, BLOCK=8)
        assert out[:5].tolist() == want and out[5:].tolist() == [9.0] * 3, pos


def test_bool_mask_turns_an_integer_mask_into_bool(rt):
    if not rt.interpreted:
        pytest.skip("the interpreter's masks")
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from tritonllm_course.runtime import bool_mask
    made = bool_mask(TensorHandle(np.array([0, 2, 1], dtype=np.int32), tl.int32))
    assert made.data.dtype == np.bool_ and made.data.tolist() == [False, True, True] and made.dtype == tl.int1
    kept = TensorHandle(np.array([True, False]), tl.int1)
    assert bool_mask(kept) is kept and bool_mask(None) is None


# --- installed without the course (a plain `pip install .`) ---------------------------------------------
def test_a_plain_install_finds_the_course_from_the_current_folder_or_says_where(tmp_path):
    import shutil
    site, course = tmp_path / "site", tmp_path / "course"
    shutil.copytree(ROOT / "tritonllm_course", site / "tritonllm_course",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("exercises", "notebooks", "tritonllm_course"):
        (course / folder).mkdir(parents=True)
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITONLLM_COURSE_ROOT"}
    env["PYTHONPATH"] = str(site)
    run = lambda cwd, *argv: subprocess.run(  # noqa: E731
        [sys.executable, "-c", "import sys; from tritonllm_course import cli; sys.exit(cli.main(sys.argv[1:]))",
         *argv], cwd=cwd, env=env, capture_output=True, text=True)
    found = run(course / "notebooks", "--version")
    assert found.returncode == 0 and f"course folder {course}" in found.stdout, found.stderr
    lost = run(tmp_path, "make-exercises", "--check")
    assert lost.returncode == 2 and "TRITONLLM_COURSE_ROOT" in lost.stderr and "no course folder" in lost.stderr
    assert "no course folder" in run(tmp_path, "--version").stdout
    env["TRITONLLM_COURSE_ROOT"] = str(course)
    assert f"course folder {course}" in run(tmp_path, "--version").stdout


def test_help_and_version_do_not_import_torch():
    code = ("import sys\nfrom tritonllm_course import cli\nfor argv in (['--help'], ['--version']):\n"
            "    try: cli.main(argv)\n    except SystemExit: pass\nprint('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "False", r.stderr


# --- scripts/install.py ----------------------------------------------------------------------------------
def _installer():
    import importlib.util
    spec = importlib.util.spec_from_file_location("course_install", ROOT / "scripts" / "install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_colab_keeps_what_the_runtime_has_and_takes_the_rest_from_the_supported_ranges(monkeypatch):
    inst = _installer()
    held, reqs = inst.plan(sys.executable, None, colab=True)
    assert {"torch", "triton", "numpy", "pytest"} <= set(held)          # this Python has them: all kept
    assert not {inst.name(r) for r in reqs} & set(inst.COLAB_SKIP)
    assert set(reqs) <= set(inst.dependencies(()))                      # ranges, never the exact pins
    monkeypatch.setattr(inst, "installed", lambda python, names: {})    # a runtime without torch
    held, reqs = inst.plan(sys.executable, None, colab=True)
    assert held == {} and reqs == inst.dependencies(())
    assert "jupyterlab" not in {inst.name(r) for r in reqs}             # the skip list's stack is never added
    held, reqs = inst.plan(sys.executable, {"torch": "2.9.1", "triton": "3.5.1"}, colab=False)
    assert held == {"torch": "2.9.1", "triton": "3.5.1"} and reqs == inst.requirements(inst.KEPT)
    assert inst.plan(sys.executable, None, colab=False) == ({}, inst.requirements(()))


def test_a_venv_that_has_a_cuda_torch_keeps_it(monkeypatch, tmp_path):
    """A learner's venv with its own CUDA torch (installed first, then `make lab`) keeps that torch and its triton,
    even where the Python running the installer has none: the pins' torch replaced it before."""
    inst = _installer()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    cuda = {str(venv / "bin" / "python"): {"torch": "2.14.1", "triton": "3.8.0"}}
    monkeypatch.setattr(inst, "cuda_torch", lambda python: cuda.get(python))
    monkeypatch.setattr(inst, "stamp_text", lambda: "new")
    kept = []
    monkeypatch.setattr(inst, "install", lambda python, keep, colab=False: kept.append((python, keep)))
    monkeypatch.setattr(sys, "argv", ["install.py", "--venv", str(venv)])
    inst.main()
    assert kept == [(str(venv / "bin" / "python"), {"torch": "2.14.1", "triton": "3.8.0"})]
    assert inst.plan(kept[0][0], kept[0][1], colab=False) == (kept[0][1], inst.requirements(inst.KEPT))


def test_the_supported_window_is_one_statement():
    """pyproject.toml's floors are the README's, and the exact pins sit inside them."""
    inst = _installer()
    ranges = {inst.name(r): r for r in inst.dependencies(())}
    pins = {inst.name(r): r for r in inst.requirements(())}
    readme = (ROOT / "README.md").read_text()
    for dist, floor in (("triton", "3.5"), ("torch", "2.9"), ("numpy", "1.26"), ("transformers", "5.23")):
        assert f"{dist}>={floor}" in ranges[dist] and f"{dist} {floor}" in readme
    from packaging.specifiers import SpecifierSet
    for dist in ("triton", "torch", "transformers"):
        version = pins[dist].split("==")[1]
        assert version in SpecifierSet(ranges[dist].removeprefix(dist)), (dist, version, ranges[dist])
    make = (ROOT / "Makefile").read_text()
    assert "make test-window" in (ROOT / ".ci" / "run").read_text()
    ends = [end.split("/") for end in re.search(r"^WINDOW \?= (.*)$", make, re.M).group(1).split()]
    assert len(ends) == 2 and all(len(end) == 2 for end in ends), ends        # each end: TRITON/TRANSFORMERS
    (old_triton, old_hf), (new_triton, new_hf) = ends
    assert old_triton.startswith("3.5.") and old_hf.startswith("5.23."), ends  # the oldest end is the floors
    for dist, version in (("triton", old_triton), ("transformers", old_hf), ("triton", new_triton),
                          ("transformers", new_hf)):
        assert version in SpecifierSet(ranges[dist].removeprefix(dist)), (dist, version, ranges[dist])
    one_line = " ".join(readme.split())                                         # the README names both ends
    assert (f"triton {old_triton} with transformers {old_hf} and triton {new_triton} with transformers {new_hf}"
            in one_line)


@pytest.mark.parametrize("version", ["1/../../../../tmp/escaped_venv", "", "3.5.0\n", "3.5.0rc1", "latest"])
def test_window_refuses_a_version_that_is_not_a_number_in_one_line_before_any_venv(version, tmp_path, monkeypatch,
                                                                                     capsys):
    """VERSION names the window's folder (base/window/triton-VERSION): with a '/' and '..' in it, a venv was made
    outside the base; '' installed the whole course instead."""
    inst = _installer()
    made = []
    monkeypatch.setattr(inst, "window_venv", lambda base, v, hf: made.append(v) or base / "window" / f"triton-{v}")
    monkeypatch.setattr(inst, "subprocess", None)             # nothing is run, no venv made, whatever main does
    (tmp_path / ".tritonllm-installed").write_text("")
    monkeypatch.setattr(sys, "argv", ["install.py", "--venv", str(tmp_path), "--window", version])
    with pytest.raises(SystemExit) as e:
        inst.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip().splitlines() == [err.strip()] and "--window" in err, err
    assert made == []
    monkeypatch.setattr(sys, "argv", ["install.py", "--venv", str(tmp_path), "--window", "3.5.0"])
    inst.main()                                                # a version number goes on to make its venv
    assert made == ["3.5.0"]


@pytest.mark.parametrize("args, says", [(["--window", "3.5.0", "--transformers", "../5.23"], "--transformers"),
                                        (["--window", "3.5.0", "--transformers", "latest"], "--transformers"),
                                        (["--transformers", "5.23.0"], "--transformers goes with --window")])
def test_window_refuses_a_transformers_version_that_is_not_a_number_or_alone(args, says, tmp_path, monkeypatch,
                                                                             capsys):
    """--transformers names the window's folder too (triton-X-transformers-Y), and means nothing without --window
    (it would have installed the whole course)."""
    inst = _installer()
    made = []
    monkeypatch.setattr(inst, "window_venv", lambda base, v, hf=None: made.append((v, hf)) or base)
    monkeypatch.setattr(inst, "subprocess", None)             # nothing is run, no venv made, whatever main does
    (tmp_path / ".tritonllm-installed").write_text("")
    monkeypatch.setattr(sys, "argv", ["install.py", "--venv", str(tmp_path), *args])
    with pytest.raises(SystemExit) as e:
        inst.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip().splitlines() == [err.strip()] and says in err, err
    assert made == []
    monkeypatch.setattr(sys, "argv", ["install.py", "--venv", str(tmp_path), "--window", "3.5.0", "--transformers",
                                      "5.23.0"])
    inst.main()
    assert made == [("3.5.0", "5.23.0")]
