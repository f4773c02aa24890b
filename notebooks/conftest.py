"""nbval runs every chapter but those with widgets: tests/tools/test_widgets.py runs those top to bottom, then
moves their controls as a learner would (`notebooks_tools.widget_chapters`).

Under pytest-xdist (`-n N --dist load`) the tests go to the workers one by one, but a chapter's cells go
together, in order, to one worker: they share the kernel's state. (xdist's own `loadgroup` cannot do this
under pytest 9.2, whose node ids it can no longer rename.)

Where the chapters run the learner's kernels (a student version, which has no solutions/, or
TRITONLLM_KERNELS=exercises), a cell that stops on an exercise not filled in yet is skipped, naming it; so
is a cell of a student version that needs a file it leaves out (`student_version.withheld`), and each
later cell of that chapter that then fails (it needed what the skipped cell would have made). Any other
failure fails."""
import re
import time

import nbval.kernel
import pytest

from tritonllm_course import kernels, student_version
from tritonllm_course.notebook import runs_exercises_only, unfilled_exercise
from tritonllm_course.notebooks_tools import widget_chapters

collect_ignore = [path.name for path in widget_chapters()]

KERNEL_START_TRIES = 3
_start_new_kernel = nbval.kernel.start_new_kernel


def _start_kernel_again_if_it_died(*args, **kwargs):
    """nbval's kernel start, tried again (KERNEL_START_TRIES in all) when the kernel dies before it answers: a
    fresh clone's CI once lost chapter 28_compilers that way, every cell an error at setup, the cause not logged.
    Nothing of the chapter has run then, so a new kernel changes nothing; a kernel that started runs the
    chapter once, as before."""
    for attempt in range(KERNEL_START_TRIES):
        try:
            return _start_new_kernel(*args, **kwargs)
        except RuntimeError:
            if attempt == KERNEL_START_TRIES - 1:
                raise
            time.sleep(1 + attempt)


nbval.kernel.start_new_kernel = _start_kernel_again_if_it_died   # `RunningKernel` looks it up at each start


def _skip_reason(item) -> str | None:
    """Why the nbval cell `item`, which just failed, is skipped instead; None: it fails."""
    errors = [out for out in getattr(item, "test_outputs", None) or [] if out.get("output_type") == "error"]
    if not errors or not runs_exercises_only():
        return None
    ename, evalue = errors[-1].get("ename", ""), errors[-1].get("evalue", "")
    chapter = item.parent
    if not hasattr(chapter, "lacking"):
        chapter.lacking = {}   # {what a cell needed and this copy lacks: the first cell that needed it}
    if message := unfilled_exercise(ename, evalue):
        named = re.search(r"exercise (\S+\.py)", message)
        chapter.lacking.setdefault(f"{named[1] if named else message} unfilled", item.cell_num)
        return f"cell {item.cell_num} needs an exercise not filled in yet: {message}"
    if path := _withheld_module(ename, evalue):
        chapter.lacking.setdefault(f"{path} left out", item.cell_num)
        return f"cell {item.cell_num} needs {path}, which the student version leaves out ({ename}: {evalue})"
    if chapter.lacking:
        earlier = ", ".join(f"{what} (cell {cell})" for what, cell in chapter.lacking.items())
        return f"cell {item.cell_num} follows cells that cannot run here: {earlier}; here {ename}: {evalue}"
    return None


def _withheld_module(ename: str, evalue: str) -> str | None:
    """In a student version, the course file that a failed cell wanted and `student_version.withheld` left
    out: a module it imported (an instructors' one such as tests/planted/planted.py), or a path the error names
    (a kernel module under solutions/); None for any other error."""
    if kernels.has_solutions():
        return None
    named = re.fullmatch(r"No module named '([\w.]+)'", evalue) if ename == "ModuleNotFoundError" else None
    modules = student_version.module_files(named[1]) if named else ""
    return student_version.withheld_named(modules + evalue, kernels.course_root().resolve())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except Exception:
        if (why := _skip_reason(item)) is None:
            raise
        raise pytest.skip.Exception(why, _use_item_location=True) from None   # reported at the cell


@pytest.hookimpl(optionalhook=True)   # an xdist hook: without pytest-xdist, pytest must not reject it
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ChapterScheduling(LoadScopeScheduling):
        """One unit per test, one per notebook."""
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.endswith(".ipynb") else nodeid

    return ChapterScheduling(config, log)
