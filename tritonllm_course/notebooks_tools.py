"""Keep the chapters uniform: the standard first cell (`colab.SETUP_CELL`), the metadata that makes Colab
open a chapter on a GPU runtime, and no committed outputs.

`sync_all` (`tritonllm-course sync-notebooks`) is for the course's authors: it replaces each chapter's first
code cell and clears every output, so it refuses a student version (no solutions/), where those are a
learner's edits and results. It reads and checks every chapter before it rewrites any (a chapter that is not
a notebook, or has no code cell, or is not a regular file, a fifo say, is a `NotebookError` naming it, and
nothing is rewritten; so is a notebooks/ folder without a chapter), and writes each one atomically, never
through a symbolic link (`safe_files`). A chapter saved (in Jupyter, say) between that check and its write is
left as it was saved, and named."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

from . import safe_files
from .colab import SETUP_CELL
from .kernels import course_root

# What Colab reads when it opens a notebook: a GPU runtime (Runtime > Change runtime type), the free T4.
COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}


class NotebookError(ValueError):
    """A chapter that `sync_all` cannot rewrite (one line naming it)."""


def notebooks() -> list[Path]:
    return sorted((course_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def chapters() -> list[Path]:
    """`notebooks()` for a command that acts on every chapter: none there (no notebooks/, or not one
    `NN_name.ipynb` in it) is a `NotebookError` naming the folder, never a run that did nothing and passed."""
    found = notebooks()
    if not found:
        raise NotebookError(f"{course_root() / 'notebooks'} holds no chapter (NN_name.ipynb): nothing to do")
    return found


_WIDGET = re.compile(r"\bwidgets\.|\binteract(ive)?\(")


def widget_chapters() -> list[Path]:
    """The chapters with an ipywidgets control: tests/tools/test_widgets.py runs them top to bottom and then
    moves their controls, so nbval leaves them out (notebooks/conftest.py) rather than run them twice."""
    import nbformat
    found = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        if any(c.cell_type == "code" and "ipywidgets" in c.source and _WIDGET.search(c.source) for c in nb.cells):
            found.append(path)
    return found


def first_code_cell(nb):
    return next(c for c in nb.cells if c.cell_type == "code")


def strip(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)


def set_colab_metadata(nb) -> None:
    nb.metadata["accelerator"] = COLAB_METADATA["accelerator"]
    nb.metadata["colab"] = {**nb.metadata.get("colab", {}), **COLAB_METADATA["colab"]}


def has_colab_metadata(nb) -> bool:
    colab = nb.metadata.get("colab", {})
    return (nb.metadata.get("accelerator") == COLAB_METADATA["accelerator"]
            and all(colab.get(k) == v for k, v in COLAB_METADATA["colab"].items()))


def sync_all() -> list[Path]:
    """Write the standard first cell and the Colab metadata into every chapter and strip its outputs, as the
    module doc says; returns the chapters."""
    import nbformat
    root = course_root()
    if not (root / "solutions").is_dir():
        raise NotebookError(f"{root} has no solutions/ (a student version): sync-notebooks is for the course's "
                            "authors; here it would replace each chapter's first code cell and clear every output, "
                            "your edits and results included")
    plans = []
    for path in chapters():
        rel = path.relative_to(root)
        try:   # bytes first: a fifo or a device is refused by its type, never left to block the read
            before = safe_files.read_regular(path, follow_links=False)
            with warnings.catch_warnings():   # nbformat's advice (cells without ids, which its writes add) was
                warnings.simplefilter("ignore")   # lines on stderr before a refusal's one line
                nb = nbformat.reads(before.decode("utf-8"), as_version=4)
            if not any(c.cell_type == "code" for c in nb.cells):
                raise NotebookError(f"{rel} has no code cell for the set-up cell: no chapter was rewritten")
            # the edits inside the try: nbformat reads a field of the wrong type (metadata.colab a list, say)
            # without a word, and only the edit of it fails
            first_code_cell(nb).source = SETUP_CELL
            set_colab_metadata(nb)
            strip(nb)
            text = nbformat.writes(nb)
        except safe_files.UnreadableFile as e:
            raise NotebookError(f"{str(e).replace(str(path), str(rel), 1)}; no chapter was rewritten") from None
        except NotebookError:
            raise
        except Exception as e:   # not JSON, not a notebook, a directory, unreadable: all the same to a chapter
            said = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise NotebookError(f"{rel} is not a readable notebook ({said}): no chapter was rewritten") from None
        text += "" if text.endswith("\n") else "\n"   # as nbformat.write ends a file
        try:
            safe_files.check_writable(path, root)
        except safe_files.UnsafeWrite as e:
            raise NotebookError(f"{e}; no chapter was rewritten") from None
        plans.append((path, before, text))
    changed = []
    for path, before, text in plans:
        try:
            now = safe_files.read_regular(path, follow_links=False)
        except safe_files.UnreadableFile:
            now = None
        if now != before:   # saved, moved or replaced since it was read: what is there now is kept
            changed.append(str(path.relative_to(root)))
        elif before != text.encode():
            safe_files.atomic_write_text(path, text, root)
    if changed:
        raise NotebookError(f"{', '.join(changed)} changed while the chapters were synced: left as it is now "
                            "(the others were synced); run sync-notebooks again")
    return [path for path, _, _ in plans]
