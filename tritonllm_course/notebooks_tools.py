"""Keep the chapters uniform: the standard first cell (`colab.SETUP_CELL`), the metadata that makes Colab
open a chapter on a GPU runtime, and no committed outputs."""
from __future__ import annotations

import re
from pathlib import Path

from .colab import SETUP_CELL
from .kernels import course_root

# What Colab reads when it opens a notebook: a GPU runtime (Runtime > Change runtime type), the free T4.
COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}


def notebooks() -> list[Path]:
    return sorted((course_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))


_WIDGET = re.compile(r"\bwidgets\.|\binteract(ive)?\(")


def widget_chapters() -> list[Path]:
    """The chapters with an ipywidgets control: tests/test_widgets.py runs them top to bottom and then
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
    import nbformat
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        first_code_cell(nb).source = SETUP_CELL
        set_colab_metadata(nb)
        strip(nb)
        nbformat.write(nb, path)
    return notebooks()
