"""nbval runs every chapter but those with widgets: tests/test_widgets.py runs those top to bottom, then
moves their controls as a learner would (`notebooks_tools.widget_chapters`)."""
from tritonllm_course.notebooks_tools import widget_chapters

collect_ignore = [path.name for path in widget_chapters()]
