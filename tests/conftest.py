"""Test session set-up: solutions selected, runtime chosen before triton is imported, `gpu` marker.

In a student version of the course (no solutions/: `tritonllm-course student-copy` or `student-branch`)
the tests check the learner's kernels: every kernel they load comes from exercises/, a test whose exercise
is not filled in yet is skipped saying which, and a test marked `needs_solutions` (it reads solutions/
itself) is skipped. So is a test that fails on a course file the student version leaves out
(`student_version.WITHHELD`, such as tests/planted/test_planted_bugs.py), naming the file.

The tests sit in folders by topic (CONTRIBUTING.md); what every folder uses is here, what one folder needs
in its own conftest.py (tests/lab's).
"""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDENT = not (ROOT / "solutions").is_dir()
os.environ.setdefault("TRITONLLM_KERNELS", "exercises" if STUDENT else "solutions")

import pytest  # noqa: E402

import tritonllm_course  # noqa: E402
from tritonllm_course import kernels  # noqa: E402

RT = tritonllm_course.setup()


# the unfilled exercises the running test asked for (its outcome, whatever it is, becomes a skip naming them:
# code that turns every exception of a kernel into a verdict, `check` among them, may swallow the skip)
UNFILLED: list[str] = []


def _load_exercises_instead(load):
    """`kernels.load` for a student version: the exercise whatever the source asked for; one not filled in
    yet skips the test (at import: its whole module). A course root of a test's own (course_copy) is
    loaded as asked."""
    def load_exercise(family, source=None, function=None, *args, **kwargs):
        if kernels.course_root().resolve() != ROOT:
            return load(family, source, function, *args, **kwargs)
        try:
            return load(family, "exercises", function, *args, **kwargs)
        except kernels.NotImplementedYet as e:
            UNFILLED.append(str(e))
            pytest.skip(f"{e} (this copy has no solutions/ to test instead)", allow_module_level=True)
    return load_exercise


if STUDENT:
    kernels.load = _load_exercises_instead(kernels.load)


def _withheld_file(error: BaseException) -> str | None:
    """The course file that `error` names (a missing module, or a path in its message) and that the
    student version leaves out; None when it names none."""
    from tritonllm_course.student_version import module_files, withheld_named
    module = error.name if isinstance(error, ModuleNotFoundError) and error.name else None
    return withheld_named((module_files(module) if module else "") + str(error), ROOT)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    UNFILLED.clear()
    try:
        result = yield
    except Exception as e:
        if STUDENT and (path := _withheld_file(e)):
            raise pytest.skip.Exception(f"needs {path}, which the student version leaves out",
                                        _use_item_location=True) from None
        if not UNFILLED:
            raise
    if UNFILLED:   # passed or failed, it did not test what it is for
        raise pytest.skip.Exception(f"{UNFILLED[0]} (this copy has no solutions/ to test instead)",
                                    _use_item_location=True)
    return result


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_solutions: reads solutions/ itself (skipped in a student version)")


def pytest_collection_modifyitems(config, items):
    if STUDENT:
        skip = pytest.mark.skip(reason="needs solutions/, which a student version does not have")
        for item in items:
            if "needs_solutions" in item.keywords:
                item.add_marker(skip)
    if RT.on_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _memcheck():
    """Under the interpreter every kernel's loads and stores are bounds-checked against its tensor
    arguments (`tritonllm_course.memcheck`): what would be an illegal address on a GPU fails here.
    TRITONLLM_MEMCHECK=0 turns it off."""
    if RT.on_gpu or os.environ.get("TRITONLLM_MEMCHECK", "1") == "0":
        yield
        return
    from tritonllm_course import memcheck
    with memcheck.checked():
        yield


@pytest.fixture(scope="session")
def rt():
    return RT


@pytest.fixture
def course_copy(tmp_path, monkeypatch):
    """An empty course root (exercises/ and solutions/ dirs) that the kernel loader reads instead."""
    (tmp_path / "exercises").mkdir()
    (tmp_path / "solutions").mkdir()
    monkeypatch.setenv("TRITONLLM_COURSE_ROOT", str(tmp_path))
    return tmp_path
