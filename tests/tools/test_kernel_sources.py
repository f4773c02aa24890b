"""The CLI and the engine run the kernels TRITONLLM_KERNELS selects ("auto" when unset, as the chapters),
and say which source each slot used."""
from pathlib import Path

import pytest

from helpers import filled
from tritonllm_course import cli, kernels, regions
from tritonllm_course.engine.ops import OpTable

ROOT = Path(__file__).resolve().parents[2]


def test_sources_line_counts_what_was_loaded():
    used = {"ln1": "auto: exercises", "ln2": "exercises", "embedding": "auto: solutions",
            "in_proj": "solutions", "lm_head": "solutions"}
    assert kernels.sources_line(used) == "kernels: 3 solutions, 2 exercises (ln1, ln2)"
    assert kernels.sources_line({"ln1": "exercises"}) == "kernels: 1 exercises"


@pytest.mark.parametrize("value, expected", [(None, "auto"), ("exercises", "exercises"), ("solutions", "solutions")])
def test_the_engines_default_is_what_the_environment_selects(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("TRITONLLM_KERNELS", raising=False)
    else:
        monkeypatch.setenv("TRITONLLM_KERNELS", value)
    assert kernels.selected() == expected
    monkeypatch.setenv("TRITONLLM_KERNELS", "mine")
    with pytest.raises(ValueError, match="TRITONLLM_KERNELS must be one of auto, exercises, solutions, got 'mine'"):
        OpTable()


@pytest.mark.needs_solutions
def test_the_engine_runs_a_filled_exercise_by_default(course_copy, monkeypatch):
    """A filled exercise is what the engine's slots run when nothing is selected (auto), and with
    TRITONLLM_KERNELS=exercises; the others come from the solutions under auto."""
    for path in (ROOT / "solutions").glob("*.py"):
        (course_copy / "solutions" / path.name).write_text(path.read_text())
        (course_copy / "exercises" / path.name).write_text(regions.make_exercise(path.read_text(), path.stem))
    exercise = course_copy / "exercises" / "embedding.py"
    exercise.write_text(filled(exercise.read_text(), (ROOT / "solutions" / "embedding.py").read_text()))
    monkeypatch.delenv("TRITONLLM_KERNELS")
    used = OpTable(sources={"ln1": "reference"}).sources()
    assert used["embedding"] == "auto: exercises" and used["ln2"] == "auto: solutions"
    line = kernels.sources_line(used)
    assert line.startswith("kernels: ") and "1 exercises (embedding)" in line and "1 reference (ln1)" in line


def test_generate_with_unfilled_exercises_selected_says_which(capsys, monkeypatch):
    monkeypatch.setenv("TRITONLLM_KERNELS", "exercises")
    monkeypatch.setattr(kernels, "exercise_status", lambda family, function=None: (
        False, f"exercise {family}.py is not implemented yet (fill in the region at line 1)"))
    status = cli.main(["generate", "--model", "random", "--prompt-ids", "1,2", "--max-new-tokens", "2",
                       "--backend", "triton"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "is not implemented yet" in err and "TRITONLLM_KERNELS=exercises" in err
