"""Bad options and environment of the command lines: `tritonllm-course` (targets, check, colab-links, the course
folder, TRITONLLM_DTYPE), the pytest plugin's log files, and the measurement modules run with `python -m`. Each is
refused before any work in one line that names the option, variable or file, with exit status 2 (pytest's own
usage error for the plugin), never a traceback, a file written through a link, or a silent default."""
import json
from types import SimpleNamespace

import pytest

from tritonllm_course import checking, cli, pytest_faillog, targets
from tritonllm_course.colab import colab_url
from tritonllm_course.measure import benchmark, family, quant_accuracy
from tritonllm_course.runtime import course_root_error, gpu_available, setup


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
                                         "\"contexts\": []}", "not a bench record (missing or malformed: rows)")])
def test_family_collect_names_a_bench_record_that_is_not_one(text, says, tmp_path, capsys):
    """A bench.json cut off mid-write (or any stray one) under --out was a traceback from inside the table."""
    (tmp_path / "engine_x_2026-01-01").mkdir()
    (tmp_path / "engine_x_2026-01-01" / "bench.json").write_text(text)
    assert family.main(["--collect", "--out", str(tmp_path)]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"family: error: {tmp_path / 'engine_x_2026-01-01' / 'bench.json'}: {says}"), line


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
