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


def test_the_records_are_whole_and_the_readme_says_what_they_say():
    for path in gpu_parts.RECORDS.glob("*.json"):
        rec = json.loads(path.read_text())
        for key in ("part", "commit", "date", "gpu", "passed", "failed", "skipped", "passed_all", "seconds"):
            assert key in rec, f"{path.name} lacks {key}"
        assert path.stem.split("_")[0] == rec["part"]
    line = gpu_parts.readme_line()
    assert line in (ROOT / "README.md").read_text().replace("\n", " ")
    for path in gpu_parts.RECORDS.glob("*_float16.json"):       # the fp16 passes are named, each with its date
        rec = json.loads(path.read_text())
        assert (f"{rec['part']} ({rec['date']})" in line.partition("in float16 on")[2]) == rec["passed_all"], line


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
