"""Planting the bugs learners make: a copy of a solution with one edit, installed as a filled-in exercise
in a scratch course, so that `check` runs it exactly as it runs a learner's kernel.

A `Bug` names the slot whose check must catch it and the edits that make it: (old, new) pairs, each old
text found exactly once in the solution, so a bug that no longer applies (the solution changed) fails
loudly instead of testing nothing. The tables live in tests/planted/bugs_<topic>.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Bug:
    slot: str                              # the slot whose check must fail
    family: str                            # solutions/<family>.py to copy
    what: str                              # the bug, as a learner would make it
    edits: tuple[tuple[str, str], ...]     # (old, new): each old text occurs once in the solution
    out_of_bounds: bool = False            # strays past a tensor (the interpreter's bounds check names it):
                                           # skipped on a GPU, where it may fault and take the CUDA context

    @property
    def id(self) -> str:
        return f"{self.slot}: {self.what}"


def planted_text(bug: Bug) -> str:
    """The solution with the bug's edits, its regions marked as filled-in exercise regions."""
    text = (ROOT / "solutions" / f"{bug.family}.py").read_text()
    for old, new in bug.edits:
        count = text.count(old)
        assert count == 1, f"{bug.id}: {old!r} occurs {count} times in solutions/{bug.family}.py"
        text = text.replace(old, new)
    return text.replace("# BEGIN SOLUTION", "# BEGIN EXERCISE").replace("# END SOLUTION", "# END EXERCISE")


def copy_solutions(root: Path) -> None:
    """Every solution of the course under a scratch root: a family may take a jit function from another
    (`kernels.jit_function`: flash_attention's online softmax from attention.py, split-K's GEMV walk from
    linear.py), and a missing one would fail the check before any case ran, for a reason that is not the bug."""
    for path in sorted((ROOT / "solutions").glob("*.py")):
        (root / "solutions" / path.name).write_text(path.read_text())


def plant(bug: Bug, root: Path) -> Path:
    """Write the course's solutions and the planted exercise of `bug.family` under a scratch root."""
    copy_solutions(root)
    path = root / "exercises" / f"{bug.family}.py"
    path.write_text(planted_text(bug))
    return path


def out_of_bounds(bugs: list[Bug], *names: str) -> list[Bug]:
    """`bugs` with those named by `names` marked `out_of_bounds`: a name is a bug's `what` (every slot's
    bug of that name) or its `id` ("slot: what", that one); each must match a bug."""
    missing = set(names) - {b.what for b in bugs} - {b.id for b in bugs}
    assert not missing, f"no bug named {sorted(missing)}"
    return [replace(b, out_of_bounds=True) if b.what in names or b.id in names else b for b in bugs]
