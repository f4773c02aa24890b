"""nbval runs every chapter but those with widgets: tests/test_widgets.py runs those top to bottom, then
moves their controls as a learner would (`notebooks_tools.widget_chapters`).

Under pytest-xdist (`-n N --dist load`) the tests go to the workers one by one, but a chapter's cells go
together, in order, to one worker: they share the kernel's state. (xdist's own `loadgroup` cannot do this
under pytest 9.2, whose node ids it can no longer rename.)"""
import pytest

from tritonllm_course.notebooks_tools import widget_chapters

collect_ignore = [path.name for path in widget_chapters()]


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
