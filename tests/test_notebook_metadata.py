"""The chapters in Colab: opened on a GPU runtime, a first cell that survives a runtime restart, an exercise
hint for Colab's file editor (a fake `google.colab` stands in for Colab)."""
import os
import sys
import types

import nbformat
import pytest

import tritonllm_course
from tritonllm_course import notebook
from tritonllm_course.colab import COLAB_ROOT, SETUP_CELL
from tritonllm_course.kernels import course_root
from tritonllm_course.notebooks_tools import COLAB_METADATA, first_code_cell, has_colab_metadata, notebooks, sync_all


def test_every_chapter_opens_on_a_gpu_runtime_in_colab():
    assert notebooks()
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        assert has_colab_metadata(nb), f"{path.name}: no Colab GPU metadata; run `tritonllm-course sync-notebooks`"
        assert nb.metadata["accelerator"] == "GPU" and nb.metadata["colab"]["gpuType"] == "T4"


def test_sync_writes_the_metadata_the_first_cell_and_strips_outputs(course_copy):
    (course_copy / "notebooks").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 99"), nbformat.v4.new_code_cell("print(1)"),
                nbformat.v4.new_code_cell("x = 2")]
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="2\n")]
    nb.cells[2].execution_count = 3
    nb.metadata["colab"] = {"name": "kept"}
    path = course_copy / "notebooks" / "99_test.ipynb"
    nbformat.write(nb, path)
    assert sync_all() == [path]
    nb = nbformat.read(path, as_version=4)
    assert has_colab_metadata(nb) and nb.metadata["colab"] == {"name": "kept", **COLAB_METADATA["colab"]}
    assert first_code_cell(nb).source == SETUP_CELL
    assert not nb.cells[2].outputs and nb.cells[2].execution_count is None


@pytest.fixture
def fake_colab(monkeypatch):
    """`google.colab` in sys.modules, with a `files.view` that records what it was asked to open."""
    opened = []
    colab = types.ModuleType("google.colab")
    colab.files = types.SimpleNamespace(view=opened.append)
    google = types.ModuleType("google")
    google.colab = colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    return opened


def _run_first_cell(root, monkeypatch):
    """The first cell as Colab runs it, the course cloned at `root` instead of COLAB_ROOT; setup() stubbed."""
    monkeypatch.setattr(tritonllm_course, "setup", lambda: "runtime")
    scope = {}
    exec(SETUP_CELL.replace(f'"{COLAB_ROOT}"', repr(str(root))), scope)
    return scope


def test_the_first_cell_goes_into_notebooks_after_a_colab_restart(tmp_path, monkeypatch, fake_colab):
    """After a runtime restart the course is still installed (the first cell finds it and installs nothing),
    but the kernel starts in /content: the cell must change into notebooks/ again (chapter 27 reads
    ../results/) and put the course folder on sys.path, every time it runs."""
    root = tmp_path / "tritonllm-course"
    (root / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(root)])
    for _ in range(2):
        scope = _run_first_cell(root, monkeypatch)
        assert os.getcwd() == str(root / "notebooks") and scope["rt"] == "runtime"
        assert sys.path.count(str(root)) == 1
        os.chdir(tmp_path)


def test_the_first_cell_outside_colab_stays_where_it_is(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(tmp_path)
    _run_first_cell(tmp_path / "nowhere", monkeypatch)
    assert os.getcwd() == str(tmp_path)


def _shown_hint(monkeypatch):
    shown = []
    import IPython.display
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    return shown


def test_the_exercise_hint_in_colab_names_the_editor_and_the_files_pane(monkeypatch, fake_colab):
    root = course_root()
    monkeypatch.setattr(notebook, "COLAB_ROOT", str(root))     # the course where Colab's first cell puts it
    shown = _shown_hint(monkeypatch)
    path = notebook.exercise("vector_add")
    assert fake_colab == [path] == [str(root / "exercises" / "vector_add.py")]   # opened in the editor
    (hint,) = shown
    assert "Colab's file editor" in hint and "**Files**" in hint
    assert f"`{root.name}/exercises/vector_add.py`" in hint                      # the path in the Files pane
    assert "New View" not in hint and "](../exercises" not in hint               # JupyterLab's hint is not it


def test_the_exercise_hint_in_jupyterlab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    shown = _shown_hint(monkeypatch)
    notebook.exercise("vector_add")
    (hint,) = shown
    assert "[../exercises/vector_add.py](../exercises/vector_add.py)" in hint and "New View" in hint
