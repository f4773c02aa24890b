"""A student copy (`tritonllm-course student-copy`), every exercise filled in, reaches the end: the CLI
generates tokens from the learner's kernels and the copy's own test suite collects without an error."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import filled
from tritonllm_course import cli, regions

ROOT = Path(__file__).resolve().parents[1]
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


def test_student_copy_refuses_a_destination_inside_the_course_or_not_empty(tmp_path, capsys):
    inside = ROOT / "exercises" / "student"
    assert cli.main(["student-copy", str(inside)]) == 2
    assert "is inside the course" in capsys.readouterr().err and not inside.exists()
    (tmp_path / "x").write_text("")
    assert cli.main(["student-copy", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def test_a_student_copy_is_not_copied_again(student, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(student))     # its filled exercises would be handed out
    assert cli.main(["student-copy", str(tmp_path / "again")]) == 2
    assert "has no solutions/" in capsys.readouterr().err
    assert cli.main(["make-exercises"]) == 2
