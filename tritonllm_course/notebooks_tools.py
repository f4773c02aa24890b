"""Keep the chapters uniform: the standard first cell (`colab.SETUP_CELL`) and no committed outputs."""
from __future__ import annotations

from pathlib import Path

from .colab import SETUP_CELL
from .kernels import course_root


def notebooks() -> list[Path]:
    return sorted((course_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def first_code_cell(nb):
    return next(c for c in nb.cells if c.cell_type == "code")


def strip(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.get("metadata", {}).pop("execution", None)


def sync_all() -> list[Path]:
    import nbformat
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        first_code_cell(nb).source = SETUP_CELL
        strip(nb)
        nbformat.write(nb, path)
    return notebooks()
