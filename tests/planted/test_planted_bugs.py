"""The check catches the bugs learners make: each bug of tests/planted/bugs_*.py, planted in a copy of its
solution and run as a filled-in exercise, fails `check` on every run (fresh random inputs each time).
A bug that passes even once means the check would tell a learner a broken kernel is right."""
import importlib
from pathlib import Path

import pytest

from planted import Bug, plant
from tritonllm_course.checking import GPU_FAULT, check

pytestmark = pytest.mark.needs_solutions   # bugs are planted in copies of solutions/

RUNS = 3    # fresh inputs each: a bug caught only by some draws fails this test
BUGS: list[Bug] = [bug for path in sorted(Path(__file__).parent.glob("bugs_*.py"))
                   for bug in importlib.import_module(path.stem).BUGS]


def test_the_bug_tables_are_not_empty_and_ids_are_unique():
    assert len(BUGS) >= 20
    ids = [b.id for b in BUGS]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.id)
def test_check_fails_a_planted_bug_on_every_run(bug, course_copy, rt):
    """Under the interpreter a bug whose check names an access past a tensor must be marked
    `out_of_bounds`: on a GPU that access may fault, and a fault takes the process's CUDA context (every
    later test of the worker) with it, so those bugs run on the CPU only."""
    if bug.out_of_bounds and not rt.interpreted:
        pytest.skip("an access past a tensor's end: only the interpreter's bounds check sees it")
    plant(bug, course_copy)
    for run in range(RUNS):
        report = check(bug.slot, "exercises", fail_fast=True, verbose=False)
        assert report.implemented, report
        # the bug, not the set-up, fails it: a case ran and failed (a module that does not import fails no case)
        assert any(not case.passed for case in report.cases), f"run {run + 1}: no case failed\n{report}"
        assert not report.passed, f"run {run + 1}: the check passed a kernel with {bug.what!r}\n{report}"
        strays = "out-of-bounds memory access" in str(report) or GPU_FAULT in str(report)
        assert bug.out_of_bounds or not strays, f"{bug.what!r} strays past a tensor: mark it out_of_bounds\n{report}"
