"""Every line of the course's code is at most MAX_LINE characters: each tracked Python file (`git ls-files`),
but the measured output in results/ (Inductor's generated code, as it was written), and each code cell of
notebooks/*.ipynb. A failure names file:line of every offender. The README stays under README_MAX_LINES lines.

A check of the course's own sources: in a student version (no solutions/) it is skipped, as the lines a
learner writes in exercises/ are theirs."""
import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINE = 120
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".ipynb_checkpoints", ".pytest_cache", "build", "dist"}

pytestmark = pytest.mark.needs_solutions


def tracked(*patterns: str) -> list[Path]:
    """The files git tracks that match `patterns` (and still exist); without git, those on disk."""
    run = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *patterns],
                         capture_output=True, text=True)
    if run.returncode == 0:
        paths = [ROOT / name for name in run.stdout.split("\0") if name]
    else:   # not a git checkout: every matching file outside what a machine or a run leaves behind
        paths = [p for pattern in patterns for p in ROOT.glob(f"**/{pattern}" if "/" not in pattern else pattern)
                 if not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)]
    return sorted({p for p in paths if p.is_file()})


def too_long(where: str, text: str) -> list[str]:
    """`where:line: length: the line's start` for each line of `text` longer than MAX_LINE."""
    return [f"{where}:{i}: {len(line)} characters: {line.strip()[:60]}..."
            for i, line in enumerate(text.split("\n"), 1) if len(line) > MAX_LINE]


def report(offenders: list[str], what: str) -> None:
    if offenders:
        pytest.fail(f"{len(offenders)} {what} longer than {MAX_LINE} characters:\n" + "\n".join(offenders),
                    pytrace=False)


def test_python_lines_are_at_most_120_characters():
    files = [p for p in tracked("*.py") if p.relative_to(ROOT).parts[0] != "results"]
    assert files, "no Python files found"
    report([o for path in files for o in too_long(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))],
           "lines")


def test_notebook_code_cells_are_at_most_120_characters():
    files = tracked("notebooks/*.ipynb")
    assert files, "no notebooks found"
    offenders = []
    for path in files:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for c, cell in enumerate(cells, 1):
            if cell["cell_type"] != "code":
                continue
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            offenders += too_long(f"{path.relative_to(ROOT)}:cell {c}", source)
    report(offenders, "code-cell lines (file:cell:line, cells counted from 1)")


README_MAX_LINES = 200      # the landing page stays short: the rest lives in docs/ and the chapters


def test_the_readme_is_under_200_lines():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; keep it under {README_MAX_LINES}"
