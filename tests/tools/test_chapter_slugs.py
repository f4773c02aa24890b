"""Chapters are cited by slug: the code and the docs name a chapter by its notebook's file name without .ipynb
(`24_split_k`), never by its number alone, so a chapter renumbered or inserted cannot leave a citation pointing
at the wrong one unnoticed (a bare "(23)" for split-K did, in scripts/gpu_extras.sh). Every slug cited names a
notebook that exists. In the chapters' own prose "chapter 08" may stay, read beside the file list, but the
number must be a chapter's, and a link's "NN · Title" must agree with the notebook it opens.
"""
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLUGS = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
NUMBERS = {int(s[:2]) for s in SLUGS}

# Code and docs: what a newcomer or a tool reads (test_style.py's files, and the prose around them). results/'s
# Python files are Inductor's generated code, kept as it was written.
PATTERNS = ("*.py", "*.sh", "Makefile", "docs/*.md", "CONTRIBUTING.md", "README.md", "results/README.md",
            "lab/README.md")
# This file: its checks' own examples are bare numbers on purpose
SELF = "tests/tools/test_chapter_slugs.py"
# Names that are keys of saved measurements, not citations: the records under results/ and lab/results/ and the
# figures read from them (results/figures/*.json) name their rows so; renaming one would orphan every record.
RECORD_KEYS = ("(ch08)", "GEMV (chapter 05)", "Triton (chapter 05's GEMM)", '"chapter05"', "`chapter05`",
               "def chapter05(", "(chapter05)")
# Scratch chapters the tests write into a course of their own (test_notebook_metadata.py, test_safe_files.py)
SCRATCH = {"00_x", "99_test", "05_broken"}

SLUG = re.compile(r"(?<![\w/.-])(\d{2}_[a-z][a-z0-9_]*?)(?=\.ipynb|'s\b|[^\w]|$)")
ONE = r"(?:\d{2}_[a-z][a-z0-9_]*|\d{1,2}(?![\w.]))"
SEP = r"(?:\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*[-–]\s*|\s+to\s+)"
CITED = re.compile(rf"\b[Cc]hapters?\s+({ONE}(?:{SEP}{ONE})*)")
SHORT = re.compile(r"\b[Cc]h\.?\s?\d{1,2}\b|\b[Cc]hapter\d{1,2}\b")


def _exempt(path: str) -> bool:
    return path == SELF


def code_and_docs() -> list[str]:
    run = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *PATTERNS], capture_output=True, text=True)
    if run.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are what this reads")
    return sorted(p for p in run.stdout.split("\0")
                  if p and (ROOT / p).is_file() and not (p.startswith("results/") and p.endswith(".py")))


def _text(path: str) -> str:
    """The file without what is no citation: the figures' markers (their keys name the records) and RECORD_KEYS."""
    return _strip_keys(re.sub(r"<!--.*?-->", "", (ROOT / path).read_text(encoding="utf-8"), flags=re.S))


def _lines(text: str, pattern: re.Pattern):
    for i, line in enumerate(text.split("\n"), 1):
        for m in pattern.finditer(line):
            yield i, m


def unknown_slugs(where: str, text: str) -> list[str]:
    return [f"{where}:{i}: {m.group(1)}" for i, m in _lines(text, SLUG) if m.group(1) not in SLUGS | SCRATCH]


def bare_numbers(where: str, text: str) -> list[str]:
    """Each "chapter 24" (or "chapters 15 and 16", "ch08") whose number stands without its slug."""
    out = []
    for i, m in _lines(text, CITED):
        bare = [n for n in re.findall(ONE, m.group(1)) if n.isdigit()]
        if bare:
            out.append(f"{where}:{i}: {m.group(0)!r} (slugs: {', '.join(_slug(int(n)) for n in bare)})")
    out += [f"{where}:{i}: {m.group(0)!r}" for i, m in _lines(text, SHORT)]
    return out


def _slug(number: int) -> str:
    return next((s for s in SLUGS if int(s[:2]) == number), f"no chapter {number}")


def test_the_chapters_are_numbered_once():
    assert len(NUMBERS) == len(SLUGS), sorted(SLUGS)


def test_code_and_docs_cite_chapters_by_slug():
    found = [o for path in code_and_docs() if not _exempt(path) for o in bare_numbers(path, _text(path))]
    assert not found, (f"{len(found)} chapters cited by number: cite them by slug (the notebook's file name "
                       "without .ipynb):\n" + "\n".join(found))


def test_every_slug_cited_names_a_chapter():
    found = [o for path in code_and_docs() if not _exempt(path) for o in unknown_slugs(path, _text(path))]
    assert not found, "slugs that name no notebook in notebooks/:\n" + "\n".join(found)


def _prose(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)


def test_the_chapters_prose_cites_chapters_that_exist():
    """A chapter's number in a notebook is a chapter's; its slugs name notebooks; a link `[NN · Title](MM_x.ipynb)`
    has NN == MM."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        where, text = f"notebooks/{path.name}", _prose(path)
        if _exempt(where):
            continue
        found += unknown_slugs(where, re.sub(r"<!--.*?-->", "", text, flags=re.S))
        for i, m in _lines(text, CITED):
            found += [f"{where}:{i}: {m.group(0)!r}: no chapter {n}" for n in re.findall(ONE, m.group(1))
                      if n.isdigit() and int(n) not in NUMBERS]
        for i, m in _lines(text, re.compile(r"\[(\d{1,2}) · [^\]]*\]\((\d{2})_\w+\.ipynb\)")):
            if int(m.group(1)) != int(m.group(2)):
                found.append(f"{where}:{i}: {m.group(0)!r}: its number is not its notebook's")
    assert not found, "\n".join(found)


def test_the_checks_find_what_they_look_for():
    assert bare_numbers("x", "see chapter 24 and chapters 15 and 16_delta_rule_chunked; ch08") == [
        "x:1: 'chapter 24' (slugs: 24_split_k)", "x:1: 'chapters 15 and 16_delta_rule_chunked' (slugs: 15_delta_rule)",
        "x:1: 'ch08'"]
    assert not bare_numbers("x", "chapter 24_split_k's GEMV; chapters 15_delta_rule and 16_delta_rule_chunked")
    assert not bare_numbers("x", "a widget chapter takes 34-86 s; chapter 1.5")
    assert unknown_slugs("x", "05_projections.ipynb, 24_flash_decoding's merge, 99_nothing") == [
        "x:1: 24_flash_decoding", "x:1: 99_nothing"]
    assert not bare_numbers("x", _strip_keys('"GEMV (chapter 05)", "chapter05"'))
    assert bare_numbers("x", "chapter05_variant = chapter05") == ["x:1: 'chapter05'"]


def _strip_keys(text: str) -> str:
    for key in RECORD_KEYS:
        text = text.replace(key, "")
    return text
