"""The chapters as committed (no outputs) and in Colab: opened on a GPU runtime, a first cell that survives a
runtime restart, an exercise hint for Colab's file editor (a fake `google.colab` stands in for Colab)."""
import os
import subprocess
import sys
import types

import nbformat
import pytest

import tritonllm_course
from tritonllm_course import notebook
from tritonllm_course.colab import COLAB_ROOT, SETUP_CELL
from tritonllm_course.kernels import course_root
from tritonllm_course.notebooks_tools import COLAB_METADATA, first_code_cell, has_colab_metadata, notebooks, sync_all


RELEASE_CHECK = os.environ.get("TRITONLLM_RELEASE_CHECK") == "1"


def _committed_chapters(root) -> dict | None:
    """{name: the notebook's text at HEAD} of a git checkout of the course, None outside one."""
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True)  # noqa: E731
    listed = git("ls-tree", "-r", "--name-only", "HEAD", "--", "notebooks/")
    if listed.returncode != 0:
        return None
    names = [n for n in listed.stdout.split() if n.endswith(".ipynb")]
    return {n: git("show", f"HEAD:./{n}").stdout for n in names}


def _outputs(nb) -> list[int]:
    return [i for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)]


def test_chapters_are_committed_without_outputs():
    """The chapters a commit holds carry no outputs. A learner's JupyterLab saves its outputs into the working
    files: those are the learner's and no failure, so an ordinary run reads the notebooks as committed (HEAD).
    The release check (`make release-check`, TRITONLLM_RELEASE_CHECK=1) reads the working files, before they
    are committed; outside a git checkout only the release check looks."""
    if RELEASE_CHECK:
        found = {path.name: nbformat.read(path, as_version=4) for path in notebooks()}
    else:
        committed = _committed_chapters(course_root())
        if committed is None:
            pytest.skip("not a git checkout: the chapters' outputs are checked by `make release-check`")
        found = {name: nbformat.reads(text, as_version=4) for name, text in committed.items()}
    assert found, "no chapters found"
    dirty = {name: cells for name, nb in found.items() if (cells := _outputs(nb))}
    assert not dirty, (f"outputs in {dirty} (name: code cells): run `tritonllm-course sync-notebooks`, or strip "
                       "them with nbformat, before committing")


def test_chapters_are_committed_in_the_form_sync_notebooks_writes():
    """nbformat's own serialisation (sorted keys, one-space indent, a final newline): a chapter saved in another
    key order made `sync-notebooks` rewrite it with nothing changed, a diff for every author who ran it."""
    committed = _committed_chapters(course_root())
    if committed is None:
        pytest.skip("not a git checkout: the release check reads the working files")
    assert committed, "no chapters found"
    for name, text in committed.items():
        canonical = nbformat.writes(nbformat.reads(text, as_version=4))
        canonical += "" if canonical.endswith("\n") else "\n"
        assert text == canonical, f"{name} is not in nbformat's form: run `tritonllm-course sync-notebooks`"


def test_the_outputs_check_reads_the_commit_not_the_learners_files(tmp_path):
    """A chapter run in JupyterLab after its commit: HEAD is still clean, and HEAD's outputs are found."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "00_x.ipynb"
    nbformat.write(nb, path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "notebooks"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clean"], check=True)
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nb.cells[0].execution_count = 1
    nbformat.write(nb, path)                                        # the learner's autosave
    (committed,) = _committed_chapters(tmp_path).values()
    assert _outputs(nbformat.reads(committed, as_version=4)) == []
    assert _outputs(nbformat.read(path, as_version=4)) == [0]
    subprocess.run([*git, "commit", "-q", "-am", "outputs"], check=True)
    (committed,) = _committed_chapters(tmp_path).values()
    assert _outputs(nbformat.reads(committed, as_version=4)) == [0]
    assert _committed_chapters(tmp_path / "notebooks" / "missing") is None


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
    but the kernel starts in /content: the cell must change into notebooks/ again (chapter 27_finale reads
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
