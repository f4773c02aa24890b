"""The GPU verification's parts (scripts/gpu_parts.py, scripts/gpu_check.sh): every test file and chapter
belongs to a part or is host-only, each part's selection names what exists, and the README's line about the
GPU verification is the one its records give."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tritonllm_course.student_version import withheld

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_parts", ROOT / "scripts" / "gpu_parts.py")
gpu_parts = importlib.util.module_from_spec(spec)
sys.modules["gpu_parts"] = gpu_parts          # its dataclasses look their module up there
spec.loader.exec_module(gpu_parts)


def _stem(entry: str) -> str:
    """A part's entry as the lists name test files: its path under tests/, less .py (`kernels/test_slots`)."""
    return Path(entry.partition(" -k ")[0]).relative_to("tests").with_suffix("").as_posix()


def test_every_test_file_is_in_one_part_or_host_only():
    files = {p.relative_to(ROOT / "tests").with_suffix("").as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    placed = {}
    for name in gpu_parts.FULL:
        for entry in gpu_parts.PARTS[name].tests:
            if entry != "tests":
                placed.setdefault(_stem(entry), []).append(name)
    for stem in gpu_parts.HOST_ONLY:
        placed.setdefault(stem, []).append("host")
    for entry in gpu_parts.PARTS["quick"].tests:    # quick's own file: its slots run in full in `kernels`
        placed.setdefault(_stem(entry), ["quick"])
    missing = sorted(files - set(placed))
    twice = {s: parts for s, parts in placed.items() if len(parts) > 1}
    assert not missing, f"test files in no GPU part and not HOST_ONLY (scripts/gpu_parts.py): {missing}"
    # a student version leaves some test files out (student_version.WITHHELD): the parts may name those
    stale = sorted(s for s in set(placed) - files if not withheld(f"tests/{s}.py"))
    assert not stale, f"parts name test files that do not exist: {stale}"
    assert not twice, f"test files in two places: {twice}"


def test_each_parts_files_and_chapters_exist_and_quicks_filters_name_tests():
    for name, part in gpu_parts.PARTS.items():
        for entry in part.tests:
            path, _, expr = entry.partition(" -k ")
            assert (ROOT / path).exists(), f"{name}: {path} does not exist"
            for word in re.findall(r"\w+", expr):
                if word not in ("or", "and", "not"):
                    assert f"def test_{word}" in (ROOT / path).read_text() or re.search(
                        rf"def test_\w*{word}", (ROOT / path).read_text()), f"{name}: -k {word} names no test"
        for chapter in part.notebooks:
            assert chapter == "*" or (ROOT / "notebooks" / chapter).is_file(), f"{name}: no chapter {chapter}"
    assert "*" in gpu_parts.PARTS["chapters"].notebooks


def test_quicks_arguments_keep_the_other_files_whole():
    args = gpu_parts.pytest_args("quick")
    k = args[args.index("-k") + 1]
    assert "(test_pdl and (" in k and k.endswith("not (test_engine_levels or test_pdl)"), k
    assert "--nbval-lax" in args and args[args.index("-m") + 1] == "not timing and not alone"
    assert gpu_parts.pytest_args("timing")[-1] == "timing or alone"


def test_the_parts_fit_a_device_call():
    for name, part in gpu_parts.PARTS.items():
        assert part.limit_s <= (300 if name == "quick" else 480), name


@pytest.mark.parametrize("argv", [[], ["nopart", "/tmp/x"], ["quick"], ["quick,nopart", "/tmp/x"],
                                  ["quick,extra", "/tmp/x"]])
def test_gpu_check_refuses_a_part_it_does_not_know_in_one_line(argv):
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), *argv], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (r.returncode, r.stderr)
    assert "usage" in r.stderr or "no part" in r.stderr


@pytest.mark.parametrize("env", [{"LIMIT_S": "abc"}, {"LIMIT_S": "0"}, {"JOBS": "-2"}, {"BUDGET_S": "300.5"},
                                 {"EXTRA_TIMEOUT": "x"}, {"TRITONLLM_DTYPE": "float64"}])
def test_gpu_check_refuses_a_bad_setting_in_one_line_before_any_step(tmp_path, env):
    """A limit the steps hand to `timeout` ran the part anyway, which failed in 0 s with timeout's usage."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "quick", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    name = next(iter(env))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()], (r.returncode, r.stderr)
    assert name in r.stderr and not (tmp_path / "out").exists()


def _gpu_check(argv, env=None, cwd=None):
    """gpu_check.sh with the course's Python and a 1 s limit: a run the checks should have refused ends at once."""
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "PYTHON": sys.executable, "LIMIT_S": "1",
                                                     **(env or {})})


@pytest.mark.parametrize("argv, env, says", [
    ([","], {}, "empty part name"), (["quick,"], {}, "empty part name"), ([",quick"], {}, "empty part name"),
    (["quick,,kernels"], {}, "empty part name"), (["quick kernels"], {}, "no part named 'quick kernels'"),
    (["extra"], {"EXTRAS": "bogusname"}, "EXTRAS: no extra named 'bogusname'"),
    (["extra"], {"EXTRAS": "engine *"}, "EXTRAS: no extra named '*'"), (["extra"], {"EXTRAS": " "}, "EXTRAS")])
def test_gpu_check_refuses_an_empty_part_name_or_an_unknown_extra_in_one_line(tmp_path, argv, env, says):
    """Each ran nothing and passed (exit 0, an empty summary)."""
    r = _gpu_check([*argv, str(tmp_path / "out")], env)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()], (r.returncode, r.stderr)
    assert says in r.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("held", ["results/data.csv", "logs/x.log", "results.tgz", "logs.tgz", "summary.md",
                                  "record_quick.json", ".hidden"])
def test_gpu_check_refuses_an_outdir_that_holds_anything_and_leaves_it_as_it_was(tmp_path, held):
    """The run packs its OUTDIR's results/ and logs/ into archives and removes them: given a folder of the user's
    (the course's own, whose results/ holds the measured data), it took and deleted what it had not written."""
    out = tmp_path / "out"
    (out / held).parent.mkdir(parents=True, exist_ok=True)
    (out / held).write_text("the user's")
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    r = _gpu_check(["quick", str(out)])
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()], (r.returncode, r.stderr)
    assert "OUTDIR" in r.stderr and "not a new or empty folder" in r.stderr
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert (out / held).read_text() == "the user's"


def test_gpu_check_takes_a_new_or_empty_outdir_and_reads_a_relative_one_from_the_callers_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new"):   # past the OUTDIR check, to the next one
        r = _gpu_check(["quick", str(out)], {"LIMIT_S": "abc"})
        assert r.returncode == 2 and "LIMIT_S" in r.stderr and "OUTDIR" not in r.stderr, r.stderr
    (tmp_path / "results").mkdir()     # the caller's results/, not the course's
    (tmp_path / "results" / "data.csv").write_text("1")
    r = _gpu_check(["quick", "results"], cwd=tmp_path)
    assert r.returncode == 2 and f"OUTDIR {tmp_path}/results is not" in r.stderr, r.stderr


def test_a_part_fits_what_is_left_of_a_call_by_its_last_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_parts, "RECORDS", tmp_path)
    limit = gpu_parts.PARTS["chapters"].limit_s
    assert gpu_parts.fit("chapters", 10_000) == (limit, "no recorded pass")    # no record: its whole limit
    assert gpu_parts.fit("chapters", limit)[0] is None                          # ... less the record's seconds
    (tmp_path / "chapters.json").write_text(json.dumps({"part": "chapters", "passed_all": True, "seconds": 100}))
    need = 100 * 3 // 2 + 30
    assert gpu_parts.fit("chapters", need + gpu_parts.RECORD_S)[0] == need      # runs under what is left
    got, why = gpu_parts.fit("chapters", need + gpu_parts.RECORD_S - 1)
    assert got is None and "chapters needs 180 s" in why and "100 s" in why
    assert gpu_parts.fit("chapters", need + 10, "chapters_float16")[0] is None  # fp16 has no pass of its own
    (tmp_path / "chapters.json").write_text(json.dumps({"part": "chapters", "passed_all": False, "seconds": 100}))
    assert gpu_parts.fit("chapters", need + gpu_parts.RECORD_S)[0] is None      # a failed run says nothing
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_parts.py"), "fit", "chapters", "5"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "chapters needs" in r.stdout


def test_a_record_counts_the_durations_log(tmp_path):
    log = tmp_path / "d.tsv"
    log.write_text("a\tpassed\t1.0\nb\tfailed\t2.0\nc\tskipped\t0.1\nd\tpassed\t0.2\n")
    rec = gpu_parts.record("quick", log, 1, 12.0)
    assert (rec["passed"], rec["failed"], rec["skipped"], rec["passed_all"]) == (2, 1, 1, False)


def test_a_record_passes_only_where_a_test_passed_and_none_failed(tmp_path):
    """pytest exits 0 where it collected nothing: such a part's record said it passed, with 0 tests."""
    log = tmp_path / "d.tsv"
    for text, passed in (("", False), ("a\tskipped\t0.1\n", False), ("a\tpassed\t1.0\n", True)):
        log.write_text(text)
        assert gpu_parts.record("quick", log, 0, 12.0)["passed_all"] is passed, text
    # gpu_check.sh makes the durations file before its part runs: there, even where no test ends
    assert ': >"$LOGS/durations-$tag.tsv"' in (ROOT / "scripts" / "gpu_check.sh").read_text()


@pytest.mark.parametrize("args, says", [(["missing.tsv", "0", "10"], "DURATIONS"), (["d.tsv", "x", "10"], "RC"),
                                        (["d.tsv", "0", "inf"], "SECONDS")])
def test_the_record_command_refuses_a_missing_durations_file_or_a_bad_number_in_one_line(tmp_path, args, says):
    (tmp_path / "d.tsv").write_text("a\tpassed\t1.0\n")
    args = [str(tmp_path / args[0]), *args[1:], str(tmp_path / "rec.json")]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_parts.py"), "record", "quick", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()], (r.returncode, r.stderr)
    assert f"record: {says}" in r.stderr and not (tmp_path / "rec.json").exists()


def test_the_records_are_whole_and_the_readme_says_what_they_say():
    for path in gpu_parts.RECORDS.glob("*.json"):
        rec = json.loads(path.read_text())
        for key in ("part", "commit", "date", "gpu", "passed", "failed", "skipped", "passed_all", "seconds"):
            assert key in rec, f"{path.name} lacks {key}"
        assert path.stem.split("_")[0] == rec["part"]
    line = gpu_parts.readme_line()
    assert line in (ROOT / "README.md").read_text().replace("\n", " ")
    half = {}                                   # "gpu (date)" -> the fp16 parts the line names there
    for run in line.rstrip(".").split("; in float16 on ")[1:]:
        where, _, parts = run.partition("): ")
        half[where + ")"] = parts.split(", ")
    for path in gpu_parts.RECORDS.glob("*_float16.json"):       # the fp16 passes are named, each with its date
        rec = json.loads(path.read_text())
        named = rec["part"] in half.get(f"{rec['gpu']} ({rec['date']})", [])
        assert named == rec["passed_all"], line


def test_the_readme_line_is_replaced_wherever_the_last_write_wrapped_it(tmp_path, monkeypatch):
    """`readme --write` finds its sentence with the line break anywhere in it (the last write re-wraps the
    paragraph, and once put one between "GPU checks" and its parenthesis), replaces it, keeps what comes
    around it, and names the sentence when a README has none."""
    monkeypatch.setattr(gpu_parts, "ROOT", tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nThe notebooks ran. GPU checks\n(`scripts/gpu_check.sh`, old) passed.\n\nAfter.\n")
    gpu_parts.write_readme()
    text = readme.read_text()
    assert text.startswith("# Title\n\nThe notebooks ran. ") and text.endswith("\n\nAfter.\n")
    assert gpu_parts.readme_line() in text.replace("\n", " ") and "old" not in text
    readme.write_text("# Title\n\nNothing here.\n")
    with pytest.raises(SystemExit, match="GPU checks"):
        gpu_parts.write_readme()


def test_a_tests_measurement_is_kept_only_where_a_gpu_run_asks(tmp_path, monkeypatch):
    """tests/helpers.py `record_measured`: with TRITONLLM_MEASURED (gpu_check.sh sets it) a JSON record with the
    device and the date, which gpu_check.sh packs into results.tgz; without it, nothing written."""
    from helpers import record_measured
    monkeypatch.delenv("TRITONLLM_MEASURED", raising=False)
    assert record_measured("probe", {"x": 1.5}) is None and not any(tmp_path.iterdir())
    monkeypatch.setenv("TRITONLLM_MEASURED", str(tmp_path / "measured"))
    path = record_measured("probe", {"x": 1.5})
    saved = json.loads(path.read_text())
    assert path == tmp_path / "measured" / "probe.json" and saved["x"] == 1.5
    assert {"gpu", "date", "versions", "test"} <= set(saved) and "test_a_tests_measurement" in saved["test"]
    assert 'TRITONLLM_MEASURED="$OUT/results/measured"' in (ROOT / "scripts" / "gpu_check.sh").read_text()
