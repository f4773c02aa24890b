"""Bad options and environment of the command lines: `tritonllm-course` (targets, check, colab-links, the course
folder, TRITONLLM_DTYPE), the pytest plugin's log files, and the measurement modules run with `python -m`. Each is
refused before any work in one line that names the option, variable or file, with exit status 2 (pytest's own
usage error for the plugin), never a traceback, a file written through a link, or a silent default."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tritonllm_course import checking, cli, pytest_faillog, targets
from tritonllm_course.colab import colab_url
from tritonllm_course.measure import benchmark, family, quant_accuracy
from tritonllm_course.runtime import course_root_error, gpu_available, setup

ROOT = Path(__file__).resolve().parents[2]


def _no_survey(*args, **kwargs):
    pytest.fail("the survey ran: the arguments were refused only after it")


def _one_line(capsys) -> str:
    """The one line a refused command printed on stderr (nothing on stdout, no traceback)."""
    out, err = capsys.readouterr()
    assert not out and "Traceback" not in err and len(err.splitlines()) == 1, (out, err)
    return err.strip()


# --- targets --json: a link, a learner's file, a folder that cannot be written ------------------------------------
def test_targets_json_is_never_written_through_a_link(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(targets, "survey", _no_survey)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    link, dangling = tmp_path / "link.json", tmp_path / "dangling.json"
    link.symlink_to(outside)
    dangling.symlink_to(tmp_path / "made_by_the_tool.json")
    for path in (link, dangling):
        assert cli.main(["targets", "--arch", "90", "--dtype", "float16", "--json", str(path)]) == 2
        assert _one_line(capsys).startswith(f"--json: {path} is a symbolic link")
    assert outside.read_text() == "precious\n" and not (tmp_path / "made_by_the_tool.json").exists()


def test_targets_json_keeps_a_learners_files_and_needs_a_writable_folder(course_copy, tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setattr(targets, "survey", _no_survey)
    exercise = course_copy / "exercises" / "rmsnorm.py"
    exercise.write_text("# my kernel\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for path, says in ((exercise, "is in the course's exercises/ folder; write the figures elsewhere"),
                           (course_copy / "solutions" / "new.json", "is in the course's solutions/ folder; write the "
                                                                      "figures elsewhere"),
                           (notes, "exists and is not an earlier `targets --json` file: not overwritten"),
                           (locked / "kernels.json", f"cannot be written: its folder {locked} is read-only"),
                           ("", "names no file; name the file to write")):
            assert cli.main(["targets", "--json", str(path)]) == 2
            assert _one_line(capsys) == f"--json: {path or repr(path)} {says}"
    finally:
        locked.chmod(0o755)
    assert exercise.read_text() == "# my kernel\n" and notes.read_text() == "mine\n"


def test_targets_json_replaces_an_earlier_one_whole(tmp_path, capsys, monkeypatch):
    found = [targets.Kernel("rmsnorm_kernel", 90, "float16", ["operators"], {"BLOCK": 1024}, 4, 1, False)]
    monkeypatch.setattr(targets, "survey", lambda *args, **kwargs: found)
    path = tmp_path / "kernels.json"
    path.write_text(json.dumps([{"name": "old", "arch": 75, "dtype": "float16"}]))
    assert cli.main(["targets", "--arch", "90", "--dtype", "float16", "--json", str(path)]) == 0
    assert json.loads(path.read_text())[0]["name"] == "rmsnorm_kernel"
    assert [p.name for p in tmp_path.iterdir()] == ["kernels.json"]      # no temporary file left beside it
    capsys.readouterr()


# --- targets: an arch and a dtype that leave nothing to compile ---------------------------------------------------
def test_targets_refuses_an_arch_and_dtype_that_leave_nothing_to_compile(capsys, monkeypatch):
    monkeypatch.setattr(targets, "survey_here", _no_survey)
    assert cli.main(["targets", "--arch", "75", "--dtype", "bfloat16"]) == 2
    assert _one_line(capsys) == ("--arch [75] and --dtype ['bfloat16'] leave nothing to compile: no GPU asked for "
                                 "runs a dtype asked for (sm_75 runs float16)")
    with pytest.raises(ValueError, match=r"^archs \[75\] and dtypes \['bfloat16'\] leave nothing to compile"):
        targets.survey([75], ["bfloat16"])


# --- TRITONLLM_COURSE_ROOT naming no course -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["missing", "file", "empty folder"])
def test_a_course_root_that_holds_no_course_is_refused(kind, tmp_path, capsys, monkeypatch):
    root = tmp_path / "root"
    if kind == "file":
        root.write_text("root:x:0:0\n")
    elif kind == "empty folder":
        root.mkdir()
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(root))
    for argv in (["progress", "--no-run"], ["colab-links", "--repo-url", "https://github.com/o/r"], ["check", "ln1"]):
        assert cli.main(argv) == 2, argv
        line = _one_line(capsys)
        assert line.startswith(f"tritonllm-course: error: TRITONLLM_COURSE_ROOT={root} is ") and \
            "set it to the course's folder" in line, line
    with pytest.raises(ValueError, match=f"^TRITONLLM_COURSE_ROOT={root} is "):
        setup(quiet=True)


def test_a_student_copy_and_a_scratch_course_are_course_roots(tmp_path, monkeypatch):
    for folders in (("exercises", "notebooks"), ("exercises", "solutions")):   # no solutions/; no notebooks/
        root = tmp_path / "-".join(folders)
        for folder in folders:
            (root / folder).mkdir(parents=True)
        monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(root))
        assert course_root_error() is None


# --- colab-links --repo-url ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["https://github.com/a b/c", "https://github.com/a", "https://github.com/../..",
                                 "https://github.com/a/b?x=1#y", "https://github.com/a/b/tree/dev",
                                 "https://github.com/-a/b", "https://github.com/a/.git", "http://github.com/a/b", ""])
def test_colab_links_refuse_an_address_that_is_not_a_github_repository(url, capsys):
    assert cli.main(["colab-links", "--repo-url", url]) == 2
    assert _one_line(capsys) == (f"--repo-url must be a GitHub address (https://github.com/OWNER/REPO) for Colab "
                                 f"links; it is {url!r}")
    with pytest.raises(ValueError, match="the repo_url given"):
        colab_url("00_setup.ipynb", url)


@pytest.mark.parametrize("url", ["https://github.com/o/r", "https://github.com/o/r/", "https://github.com/o/r.git",
                                 "https://github.com/o/r.git/"])
def test_colab_links_take_a_repository_with_or_without_git_and_slash(url):
    assert colab_url("00_setup.ipynb", url) == \
        "https://colab.research.google.com/github/o/r/blob/main/notebooks/00_setup.ipynb"
    assert colab_url("00_setup.ipynb", "https://github.com/my-org/my.repo_2") == \
        "https://colab.research.google.com/github/my-org/my.repo_2/blob/main/notebooks/00_setup.ipynb"


# --- check: TRITONLLM_CHECK_TIMEOUT past a day, TRITONLLM_DTYPE, --dtype lists ------------------------------------
CHECK = ["check", "ln1", "--source", "solutions", "--trials", "1", "--dtype", "float32"]


def test_a_time_limit_past_a_day_is_refused(capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_CHECK_TIMEOUT", "1e10")     # the watchdog's timer died: no limit at all
    assert cli.main(CHECK) == 2
    assert _one_line(capsys) == ("TRITONLLM_CHECK_TIMEOUT must be at most 86400 seconds (a day; 0: no limit), "
                                 "got '1e10'")
    monkeypatch.setenv("TRITONLLM_CHECK_TIMEOUT", "86400")
    assert checking.time_limit_s() == 86400


@pytest.mark.parametrize("argv", [["progress", "--no-run"], CHECK])
def test_a_bad_tritonllm_dtype_is_one_line_from_the_command_line(argv, capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_DTYPE", "int8")
    assert cli.main(argv) == 2
    assert _one_line(capsys) == ("tritonllm-course: error: TRITONLLM_DTYPE must be one of ('float32', 'float16', "
                                 "'bfloat16'), got 'int8'")


@pytest.mark.parametrize("dtype", [",", "", "float32,,float32", "float32,float32", "float32,", "float64"])
def test_check_refuses_an_empty_or_repeated_dtype(dtype, capsys):
    assert cli.main([*CHECK[:-1], dtype]) == 2
    assert _one_line(capsys) == ("--dtype must be one of float32, float16, bfloat16, or a comma-separated list of "
                                 f"them, each once; got {dtype!r}")


def test_check_of_the_solutions_in_a_student_version_is_one_line(tmp_path, capsys, monkeypatch):
    """A student version has no solutions/: --source solutions (or TRITONLLM_KERNELS=solutions) was a
    FileNotFoundError traceback from the kernel loader."""
    for folder in ("exercises", "notebooks"):
        (tmp_path / folder).mkdir()
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(tmp_path))
    for asked, argv in (("--source solutions", ["--source", "solutions"]), ("TRITONLLM_KERNELS=solutions", [])):
        if not argv:
            monkeypatch.setenv("TRITONLLM_KERNELS", "solutions")
        assert cli.main(["check", "ln1", "--trials", "1", "--dtype", "float32", *argv]) == 2
        assert _one_line(capsys) == (f"{asked}: {tmp_path} has no solutions/ (a student version); check your "
                                     "exercise instead (--source exercises)")


# --- the pytest plugin's log files --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["TRITONLLM_DURATIONS", "TRITONLLM_FAILLOG"])
def test_the_plugin_refuses_a_log_it_cannot_append_to_at_startup(name, tmp_path, monkeypatch):
    config = SimpleNamespace(option=SimpleNamespace())
    target = tmp_path / "target.tsv"
    target.write_text("")
    (tmp_path / "link.tsv").symlink_to(target)
    for value, says in ((tmp_path / "missing" / "x.tsv", f"its folder {tmp_path / 'missing'} is not a directory"),
                        (tmp_path, "is a directory, not a file: move it away first"),
                        (tmp_path / "link.tsv", f"is a symbolic link (to {target}): it is never written through; "
                                                "replace it with a regular file or folder")):
        monkeypatch.setenv(name, str(value))
        with pytest.raises(pytest.UsageError) as refused:
            pytest_faillog.pytest_configure(config)
        sep = ":" if says.startswith("its folder") else ""
        assert str(refused.value) == f"{name}: {value}{sep} {says}"
    monkeypatch.setenv(name, str(tmp_path / "new.tsv"))
    pytest_faillog.pytest_configure(config)


# --- python -m tritonllm_course.measure.family --collect, .quant_accuracy, the GPU scripts ------------------------
def test_family_collect_of_no_bench_is_one_line_before_the_table(tmp_path, capsys):
    assert family.main(["--collect", "--out", str(tmp_path / "none")]) == 2
    assert _one_line(capsys).startswith(f"family: error: no bench of a family size under {tmp_path / 'none'}: ")


@pytest.mark.parametrize("text, says", [("{\"rows\": [", "not a readable bench record (JSONDecodeError"),
                                        ("[1, 2]", "not a bench record (missing or malformed: rows, gpu"),
                                        ("{\"rows\": 3, \"gpu\": 1, \"date\": 1, \"ceiling_gbps\": 1, "
                                         "\"contexts\": []}", "not a bench record (missing or malformed: rows)"),
                                        (json.dumps({"rows": [{"system": "x", "decode_ms": [], "error": ""}],
                                                     "gpu": "g", "date": "2026-01-01", "ceiling_gbps": 1.0,
                                                     "contexts": [128]}), "not a bench record (malformed: rows[0])"),
                                        (json.dumps({"rows": [], "gpu": "g", "date": "2026-01-01",
                                                     "ceiling_gbps": 0, "contexts": [128, "4096"]}),
                                         "not a bench record (malformed: ceiling_gbps, contexts)")])
def test_family_collect_names_a_bench_record_that_is_not_one(text, says, tmp_path, capsys):
    """A bench.json cut off mid-write (or any stray one) under --out was a traceback from inside the table."""
    (tmp_path / "engine_x_2026-01-01").mkdir()
    (tmp_path / "engine_x_2026-01-01" / "bench.json").write_text(text)
    assert family.main(["--collect", "--out", str(tmp_path)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"family: error: {tmp_path / 'engine_x_2026-01-01' / 'bench.json'}: {says}"), line


def test_family_collect_refuses_a_bench_record_that_is_a_fifo_without_blocking(tmp_path, capsys):
    """A bench.json that is a fifo blocked the table's read forever."""
    import threading
    bench = tmp_path / "engine_x_2026-01-01" / "bench.json"
    bench.parent.mkdir()
    os.mkfifo(bench)
    codes = []
    thread = threading.Thread(target=lambda: codes.append(family.main(["--collect", "--out", str(tmp_path)])),
                              daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():       # let the blocked read go, so that the test process can end
        os.close(os.open(bench, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("a bench.json that is a fifo blocked --collect")
    assert codes == [2]
    assert _one_line(capsys) == (f"family: error: {bench}: not a readable bench record (UnreadableFile: {bench} is "
                                 "a fifo, not a regular file: not read)")


@pytest.mark.parametrize("argv, says", [
    (["--tokens", "0"], "--tokens must be from 1 to 4096 (the small checkpoint's max_position_embeddings), got 0"),
    (["--tokens", "100000"], "--tokens must be from 1 to 4096"),
    (["--seed", "99999999999999999999"], "--seed must be in [0, 2**63 - 1], got 99999999999999999999"),
    (["--seed", "-1"], "--seed must be in [0, 2**63 - 1], got -1"),
    (["--out", "/etc/passwd"], "--out: /etc/passwd is not a directory")])
def test_quant_accuracy_refuses_its_options_before_the_models(argv, says, capsys, monkeypatch):
    monkeypatch.setattr(quant_accuracy, "run", lambda *a, **k: pytest.fail("the models were built"))
    assert quant_accuracy.main([*argv, "--small-only"]) == 2
    assert _one_line(capsys).startswith(f"quant_accuracy: error: {says}")


@pytest.mark.skipif(gpu_available(), reason="the GPU runs the scripts")
def test_a_gpu_script_says_it_needs_a_gpu_though_triton_came_first(tmp_path, capsys, monkeypatch):
    """`python -m tritonllm_course.measure.<script>` imports triton (its modules) before `setup` can switch the
    interpreter on: the script says it needs a GPU, not that triton came too early."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert benchmark.gpu_script("A GPU benchmark.\n", ["--out", str(tmp_path)]) is None
    assert capsys.readouterr().out == "A GPU benchmark.\nneeds a GPU: nothing measured\n"


# --- sync-notebooks and colab-links: no chapter at all, a chapter whose metadata has the wrong type ---------------
@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_the_chapter_commands_refuse_a_course_without_chapters(folder, course_copy, capsys):
    """Both printed nothing and exited 0: a course copied without its notebooks/ looked synced and linked."""
    if folder == "empty":
        (course_copy / "notebooks").mkdir()
    for argv in (["sync-notebooks"], ["colab-links", "--repo-url", "https://github.com/o/r"]):
        assert cli.main(argv) == 2, argv
        assert _one_line(capsys) == f"{course_copy / 'notebooks'} holds no chapter (NN_name.ipynb): nothing to do"


@pytest.mark.parametrize("colab", [[], "T4"])
def test_sync_notebooks_names_a_chapter_whose_metadata_has_the_wrong_type(colab, course_copy, capsys):
    """metadata.colab a list or a string was a TypeError traceback from the edit; a cell without an id added
    nbformat's three lines of advice before the refusal."""
    import nbformat
    (course_copy / "notebooks").mkdir()
    good = course_copy / "notebooks" / "01_triton_basics.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("my own set-up")]
    nbformat.write(nb, good)
    before = good.read_bytes()
    (course_copy / "notebooks" / "02_inside_qwen35.ipynb").write_text(json.dumps({
        "cells": [{"cell_type": "code", "source": "x", "metadata": {}, "outputs": [], "execution_count": None}],
        "metadata": {"colab": colab}, "nbformat": 4, "nbformat_minor": 5}))
    assert cli.main(["sync-notebooks"]) == 2
    line = _one_line(capsys)
    assert line.startswith("notebooks/02_inside_qwen35.ipynb is not a readable notebook (") and \
        line.endswith("): no chapter was rewritten"), line
    assert good.read_bytes() == before


# --- make-exercises and student-copy: a file where a folder must be -----------------------------------------------
def test_make_exercises_check_names_an_exercises_folder_that_is_a_file(course_copy, capsys):
    """--check said every exercise "is missing: `tritonllm-course make-exercises` writes it", which it could not."""
    (course_copy / "solutions" / "rmsnorm.py").write_text((ROOT / "solutions" / "rmsnorm.py").read_text())
    (course_copy / "exercises").rmdir()
    (course_copy / "exercises").write_text("notes\n")
    for argv in (["make-exercises", "--check"], ["make-exercises"]):
        assert cli.main(argv) == 2, argv
        assert _one_line(capsys) == "exercises is a file, not a folder: move it away, then run make-exercises"
    assert (course_copy / "exercises").read_text() == "notes\n"


def test_student_copy_names_a_file_in_the_way_of_its_folder(course_copy, tmp_path_factory, capsys):
    """It said "cannot be created: File exists", of a destination that does not exist."""
    notes = tmp_path_factory.mktemp("elsewhere") / "notes.txt"
    notes.write_text("mine\n")
    assert cli.main(["student-copy", str(notes / "copy" / "here")]) == 2
    assert _one_line(capsys) == f"{notes / 'copy' / 'here'} cannot be created: {notes} is a file, not a folder"
    assert notes.read_text() == "mine\n"


# --- bench, layers, weights_bench: an empty --model, a seed, a folder without config.json ------------------------
@pytest.mark.parametrize("argv, says", [
    (["--model", ""], "--model is empty: give 'random', a checkpoint directory or a hub id"),
    (["--model", " "], "--model is empty"),
    (["--seed", "-1"], "--seed must be in [0, 2**63 - 1], got -1"),
    (["--seed", str(2**64)], f"--seed must be in [0, 2**63 - 1], got {2**64}")])
def test_bench_names_an_empty_model_and_a_bad_seed_on_any_machine(argv, says, capsys):
    """--model '' searched the current folder for config.json. A seed outside the course's range was not checked:
    the random weights' build (`hf_model`) takes -1 as torch does, and fails on 2**64 ('Overflow when unpacking
    long long') only once the bench has started on a GPU."""
    assert cli.main(["bench", *argv]) == 2
    assert _one_line(capsys).startswith(f"tritonllm-course bench: error: {says}")


def test_weights_bench_names_a_bad_seed_on_any_machine(capsys):
    from tritonllm_course.measure import weights_bench
    assert weights_bench.main(["--seed", "-1"]) == 2
    assert _one_line(capsys) == "weights_bench: error: --seed must be in [0, 2**63 - 1], got -1"


def test_layers_names_a_config_folder_without_config_json(tmp_path, capsys):
    """A folder without config.json was a FileNotFoundError traceback."""
    assert cli.main(["layers", "--config", str(tmp_path)]) == 2
    assert _one_line(capsys) == f"tritonllm-course layers: error: no config.json at {tmp_path / 'config.json'}"


# --- the GPU scripts: their options named on any machine ----------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--slots", "nope"], "--slots nope: each must be a ready slot"),
    (["--slots"], "--slots names no slot: each must be a ready slot"),
    (["--budget-s", "nan"], "--budget-s must be > 0 seconds, got nan")])
def test_kernel_table_names_its_options_before_the_gpus_test(argv, says, capsys):
    """A slot that is not one (a typo, a planned slot) measured nothing on a GPU and wrote an empty table, as
    complete; on a CPU every bad option was 'needs a GPU'."""
    from tritonllm_course.measure import kernel_table
    with pytest.raises(SystemExit) as done:
        kernel_table.main(argv)
    assert done.value.code == 2
    assert _one_line(capsys).startswith(f"error: {says}")


def test_kernel_table_resume_refuses_a_fifo_without_blocking(tmp_path, capsys):
    import threading
    from tritonllm_course.measure import kernel_table
    fifo = tmp_path / "table.json"
    os.mkfifo(fifo)
    codes = []

    def resume():
        try:
            kernel_table._resumed(str(fifo), "NVIDIA H100", True)
        except SystemExit as e:
            codes.append(e.code)
    thread = threading.Thread(target=resume, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():       # let the blocked read go, so that the test process can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("--resume of a fifo blocked")
    assert codes == [2] and "is a fifo, not a regular file" in _one_line(capsys)


@pytest.mark.parametrize("argv, says", [
    (["--budget-s", "nan"], "--budget-s must be above 0, got nan"),
    (["--budget-s", "-1"], "--budget-s must be above 0, got -1.0"),
    (["--seed", "-1"], "--seed must be in [0, 2**63 - 1], got -1"),
    (["--steps", "nope"], "--steps: no step 'nope'; the steps are ["),
    (["--prompt-len", "0"], "prompt_len must be >= 1, got 0")])
def test_the_ladder_names_its_options_before_the_gpus_test(argv, says, capsys):
    """--budget-s NaN never ran out and a negative one skipped every step, on a GPU; on a CPU every bad option
    was 'needs a GPU'."""
    from tritonllm_course.ladder.__main__ import main
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert _one_line(capsys).startswith(f"error: {says}")


# --- scripts/: gpu_check.sh's numbers, gpu_parts.py record's OUT, install.py --venv -------------------------------

@pytest.mark.parametrize("env", [{"BUDGET_S": "08"}, {"BUDGET_S": "010"}, {"LIMIT_S": str(2**70)},
                                 {"JOBS": "99999999999999999999"}])
def test_gpu_check_refuses_a_number_bash_misreads(env, tmp_path):
    """BUDGET_S=08 ended the run in bash's arithmetic with nothing run and exit 0; 010 was 8 seconds (octal); a
    number past 2**63 printed `[`'s error and ran under it. (BUDGET_S=1 otherwise: a run let through skips every
    part of its list, and runs no test.)"""
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "quick,kernels", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHON": sys.executable, "BUDGET_S": "1", **env})
    name, value = next(iter(env.items()))
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        f"scripts/gpu_check.sh: {name} must be a whole number from 1 to 999999999 (no leading zero), got "
        f"'{value}'"], (run.returncode, run.stderr)
    assert not (tmp_path / "out").exists()


def test_gpu_parts_record_never_overwrites_a_file_that_is_not_a_record(tmp_path):
    """OUT.json named a learner's file (the course's README, say): it was replaced by the record."""
    durations = tmp_path / "d.tsv"
    durations.write_text("a\tpassed\t1.0\n")
    notes, earlier = tmp_path / "notes.md", tmp_path / "record.json"
    notes.write_text("mine\n")
    earlier.write_text(json.dumps({"part": "quick", "passed": 0}))

    def record(out):
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_parts.py"), "record", "quick",
                               str(durations), "0", "10", str(out)], capture_output=True, text=True, timeout=60)
    run = record(notes)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        f"gpu_parts.py record: OUT.json: {notes} exists and is not a part's record: not overwritten"], run.stderr
    assert notes.read_text() == "mine\n"
    assert record(earlier).returncode == 0 and json.loads(earlier.read_text())["passed"] == 1


def test_install_refuses_an_empty_venv_before_running_anything(monkeypatch, capsys):
    """--venv '' (an unset variable in quotes) made a virtual environment in the course's own folder."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("install_script", ROOT / "scripts" / "install.py")
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    monkeypatch.setattr(install.subprocess, "run", lambda cmd, *a, **k: pytest.fail(f"it ran {cmd}"))
    monkeypatch.setattr(install.sys, "argv", ["install.py", "--venv", ""])
    with pytest.raises(SystemExit) as done:
        install.main()
    assert done.value.code == 2
    assert _one_line(capsys) == "install.py: error: --venv is empty: name the virtual environment's folder " \
                                "(e.g. .venv)"


def test_engine_smoke_runs_on_a_cpu_and_names_a_bad_option():
    """On a CPU every run was a RuntimeError traceback (triton imported before `setup` could choose the
    interpreter); a bad --preset a KeyError, --prompt 0 an engine error from inside."""
    def smoke(*argv):           # started as from a shell: not under the interpreter the tests switched on
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "engine_smoke.py"), *argv],
                              capture_output=True, text=True, timeout=300, env=env)
    run = smoke("--prompt", "2", "--steps", "1")
    assert run.returncode == 0 and "operators: prompt 2, 1 steps ok" in run.stdout, run.stderr[-2000:]
    for argv, says in ((["--preset", "nope"], "argument --preset: invalid choice: 'nope'"),
                       (["--prompt", "0"], "--prompt must be >= 1 and --steps >= 0, got 0 and 3"),
                       (["--level", "nope", "--prompt", "2"], "level must be one of")):
        run = smoke(*argv)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert run.stderr.strip().splitlines()[-1].startswith(f"engine_smoke.py: error: {says}"), run.stderr


@pytest.mark.parametrize("main", ["quant_accuracy", "family"])
def test_an_empty_out_is_refused_not_taken_for_the_current_folder(main, capsys, monkeypatch):
    """Path("") is "." : `--out ""` wrote a command's results wherever it was started."""
    if main == "quant_accuracy":
        monkeypatch.setattr(quant_accuracy, "run", lambda *a, **k: pytest.fail("the models were built"))
        rc = quant_accuracy.main(["--out", "", "--small-only"])
    else:
        rc = family.main(["--collect", "--out", ""])
    assert rc == 2
    line = _one_line(capsys)
    assert "--out: an empty path names no folder" in line, line
