"""Small conveniences for the chapters: open the learner's exercise file beside the notebook."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .colab import COLAB_ROOT
from .kernels import exercise_status, has_solutions, module_path
from .regions import STUB_TAG


def _hint(family: str, path: Path, state: str, colab: bool) -> str:
    if colab:
        root = Path(COLAB_ROOT)
        shown = path.relative_to(root.parent) if path.is_relative_to(root.parent) else path
        return (f"Your exercise: `{path}` ({state}). It opens in Colab's file editor, beside this notebook; "
                f"if not, open **Files** (the folder icon on the left) and double-click `{shown}`. "
                "Edit it there, save (Ctrl+S), then re-run the check.")
    rel = f"../exercises/{family}.py"
    return (f"Your exercise: [{rel}]({rel}) ({state}). Open it beside this notebook "
            "(right-click the tab, *New View*, or drag it to the side); save, then re-run the check.")


def exercise(family: str) -> str:
    """Show where the exercise of this chapter lives (opened in Colab's editor) and whether it is done."""
    path = module_path("exercises", family)
    if not path.exists():
        names = sorted(p.stem for p in path.parent.glob("*.py") if p.stem.isidentifier() and p.stem != "__init__")
        raise FileNotFoundError(f"no exercise {family!r}: {path} does not exist (exercises/ holds "
                                f"{', '.join(names) or 'none'})")
    filled, message = exercise_status(family)
    state = "filled in" if filled else "not filled in yet"
    colab = "google.colab" in sys.modules
    if colab:
        from google.colab import files  # type: ignore[import-not-found]
        files.view(str(path))
    try:
        from IPython.display import Markdown, display
        display(Markdown(_hint(family, Path(path), state, colab)))
    except ImportError:
        print(f"Your exercise: {path} ({state})")
    return str(path)


def runs_exercises_only() -> bool:
    """Whether every kernel that runs is the learner's: a student version (no solutions/ to fall back on),
    or TRITONLLM_KERNELS=exercises. Only then may a test skip for an exercise not filled in yet."""
    return not has_solutions() or os.environ.get("TRITONLLM_KERNELS") == "exercises"


def unfilled_exercise(ename: str, evalue: str) -> str | None:
    """The message of a chapter cell's error (its exception's class name and text) when that error is an
    exercise not filled in yet: `kernels.NotImplementedYet`, or a stub's own NotImplementedError. None for
    any other error. A student version's tests skip such a cell, naming the exercise, rather than fail."""
    if ename == "NotImplementedYet" or (ename == "NotImplementedError" and STUB_TAG in evalue):
        return evalue
    return None
