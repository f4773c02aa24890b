"""The figures registry: every entry resolves in its record, every figure marked in prose (the chapters' markdown,
docs/*.md, README.md, results/README.md, lab/README.md) is the number its record gives, every number with a
measurement's unit there is marked (or declared not measured, or unsaved), and a changed record fails the stale
quote. The prose check reads the files as they are, so a rerun that moves a figure fails here until the prose
that quotes it is updated (or rendered from the record)."""
import copy
import json
import math

import pytest

from tritonllm_course import figures

ROOT = figures.ROOT


PROSE_DOCS = ["README.md", "results/README.md", "lab/README.md"]


def prose_files(by_cell=False):
    """Every file whose prose may carry figure markers, with its text (notebooks: markdown cells only, one
    entry per cell named by its index and id when `by_cell`, so that a line number points into the cell)."""
    out = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        name = path.relative_to(ROOT).as_posix()
        markdown = [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
        if by_cell:
            out += [(f"{name} cell {i} (id {c.get('id')})", "".join(c["source"])) for i, c in markdown]
        else:
            out.append((name, "\n".join("".join(c["source"]) for _, c in markdown)))
    for path in [*(ROOT / doc for doc in PROSE_DOCS), *sorted((ROOT / "docs").glob("*.md"))]:
        if path.is_file():
            out.append((path.relative_to(ROOT).as_posix(), path.read_text()))
    return out


# The code a learner reads beside the chapters: its comments and docstrings are prose too. lab/ is not here: each
# probe's docstring is its write-up, quoting the record it wrote, and lab/README.md marks what it quotes.
CODE_DIRS = ["solutions", "exercises", "tritonllm_course", "scripts"]


def code_files():
    """Every Python file of CODE_DIRS, with its comments and docstrings (`figures.code_prose`)."""
    return [(path.relative_to(ROOT).as_posix(), figures.code_prose(path.read_text()))
            for folder in CODE_DIRS for path in sorted((ROOT / folder).rglob("*.py"))]


def notebook_code_cells():
    """Every code cell of the chapters, with its comments and docstrings (a comment in a cell is read beside the
    markdown around it), named by its cell so that a line number points into the cell."""
    out = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                name = f"{path.relative_to(ROOT).as_posix()} cell {i} (id {cell.get('id')})"
                out.append((name, figures.code_prose("".join(cell["source"]))))
    return out


@pytest.fixture(autouse=True)
def fresh_registry():
    figures.clear_cache()
    yield
    figures.clear_cache()


def test_every_entry_resolves_to_a_number_in_an_existing_record():
    entries = figures.registry()
    assert entries, "results/figures/*.json hold no figures"
    for key in entries:
        number = figures.value(key)
        assert math.isfinite(number), key
        for file in figures.files(key):
            assert (ROOT / file).is_file(), f"{key}: {file} does not exist"
        cited = figures.cite(key)
        assert cited.startswith(figures.text(key) + " ("), cited


def test_every_marked_figure_in_prose_is_its_records_number():
    problems, marked = [], 0
    for name, text in prose_files():
        marked += len(figures.markers(text))
        problems += figures.check_markers(text, name)
    assert marked, "no figure markers found in the prose"
    assert not problems, f"{len(problems)} figures quoted differently from their records:\n" + "\n".join(problems)


def test_every_measured_figure_in_prose_has_a_record_or_a_declaration():
    """A number with a measurement's unit in prose carries fig:KEY, not-measured: REASON or unsaved: DATE."""
    problems = []
    for name, text in prose_files(by_cell=True):
        problems += figures.unmarked_figures(text, name)
    assert not problems, f"{len(problems)} figures without a marker:\n" + "\n".join(problems)


def test_every_figure_in_the_codes_comments_and_docstrings_is_marked_and_its_records_number():
    """A docstring or comment (of the code, or of a chapter's code cell) that quotes a measurement is held to the
    prose's rules: marked, and equal to its record (a stale "3.2 us" in a solution's docstring is a figure quoted
    differently in two places)."""
    problems, files, cells = [], code_files(), notebook_code_cells()
    assert len(files) > 50 and len(cells) > 300, [name for name, _ in files]
    for name, text in files + cells:
        problems += figures.unmarked_figures(text, name) + figures.check_markers(text, name)
    assert not problems, f"{len(problems)} figures in code comments:\n" + "\n".join(problems)


def test_code_prose_keeps_comments_and_docstrings_on_their_lines():
    source = ('"""Module: 3.2 us."""\nx = "4.0 us"  # took 5 ms\n\n\ndef f():\n    """A µs docstring,\n'
              '    12 ms."""\n    return "7 ms"\n')
    prose = figures.code_prose(source)
    assert prose.count("\n") == source.count("\n") and len(prose) == len(source)
    assert [p.split(" is a")[0] for p in figures.unmarked_figures(prose, "f.py")] == [
        "f.py:1: '3.2 us'", "f.py:2: '5 ms'", "f.py:7: '12 ms'"]


@pytest.mark.parametrize("prose, flagged", [
    ("took 0.648 ms, then", ["'0.648 ms'"]),
    ("a 6.1x lead and 56% of the floor", ["'6.1x'", "'56%'"]),
    ("the lab measured 8-20 us there", ["'8-20 us'"]),
    ("9.7 vs 10.7 us<!-- fig:t.a.ms -->", ["'9.7 vs 10.7 us"]),
    ("took 0.43 s and 4,260 GB/s", ["'0.43 s'", "'4,260 GB/s'"]),
    ("decodes at 0.648 ms/token", ["'0.648 ms'"]),
    ("the article's 16x<!-- not-measured -->", ["malformed", "'16x'"]),
    ("seen 3 us<!-- unsaved: yesterday -->", ["malformed", "'3 us'"]),
    ("took 0.648 ms<!-- fig:t.a.ms --> and 8-20 us<!-- unsaved: 2026-12-01 -->", []),
    ("8<!-- fig:t.a.ms -->-20 us<!-- fig:t.a.ms -->, 2026-12-02", []),
    ("the article's 16x<!-- not-measured: source article -->", []),
    ("tiles of 128 x 64 and 128x64, 3 sizes, an H200, T = 128, 2.1 us<!-- fig:t.a.ms -->", []),
    ("`1.5 ms` in code\n```\n3 ms\n```\n<!-- 4 ms in a comment -->", []),
])
def test_the_guard_flags_bare_figures_and_names_the_line(prose, flagged):
    problems = figures.unmarked_figures("first line\n" + prose, "f.md")
    assert len(problems) == len(flagged), problems
    for problem, want in zip(problems, flagged):
        assert problem.startswith("f.md:2: ") and want in problem, (problem, want)


def _changed(key, monkeypatch):
    """Patch the loaded record of `key` so that its number moves; returns the new text."""
    entry = figures.registry()[key]
    original = figures.record(entry["file"])
    changed = copy.deepcopy(original)
    node = figures._descend(changed, entry["path"][:-1], key, entry["file"])
    last = entry["path"][-1]
    node[last] = node[last] * 1.5 + 1
    real_record = figures.record

    def patched(file):
        return changed if file == entry["file"] else real_record(file)

    monkeypatch.setattr(figures, "record", patched)


def test_a_changed_figure_in_one_results_file_fails_every_quote_of_it(monkeypatch):
    quoted = [(name, text, key) for name, text in prose_files() for key in figures.markers(text)
              if "file" in figures.registry().get(key, {})]
    assert quoted, "no prose quotes a record figure"
    name, text, key = quoted[0]
    assert not figures.check_markers(text, name)
    before = figures.text(key)
    _changed(key, monkeypatch)
    assert figures.text(key) != before
    problems = figures.check_markers(text, name)
    assert any(f"fig:{key}:" in p for p in problems), problems
    # a computed figure built on it moves too
    dependants = [k for k, e in figures.registry().items() if "expr" in e and key in e.get("args", {}).values()]
    for dependant in dependants:
        figures.value(dependant)


def test_a_marker_must_carry_the_records_number(monkeypatch, tmp_path):
    (tmp_path / "figures").mkdir()
    record = tmp_path / "run_nvidia-h200_2026-12-02.json"
    record.write_text(json.dumps({"rows": [{"system": "a", "ms": 0.64812}, {"system": "b", "ms": 4260.4}]}))
    file = record.as_posix()
    (tmp_path / "figures" / "t.json").write_text(json.dumps({
        "t.a.ms": {"file": file, "path": ["rows", {"system": "a"}, "ms"], "digits": 3, "unit": "ms"},
        "t.b.gbps": {"file": file, "path": ["rows", 1, "ms"], "digits": 0, "unit": "GB/s"},
        "t.ratio": {"expr": "b / a", "args": {"a": "t.a.ms", "b": "t.b.gbps"}, "digits": 1, "unit": "x"},
        "t.err": {"expr": "1e3 * a / 100", "args": {"a": "t.a.ms"}, "digits": 1, "unit": "e-3"},
    }))
    monkeypatch.setattr(figures, "REGISTRY_DIR", tmp_path / "figures")
    figures.clear_cache()
    assert figures.text("t.a.ms") == "0.648 ms"
    assert figures.text("t.ratio") == "6573.5x"
    assert figures.cite("t.a.ms") == f"0.648 ms (H200, 2026-12-02, {file})"
    assert figures.text("t.err") == "6.5e-3"              # a power of ten is written flush, as a float prints it
    assert figures.check_markers("off by 6.5e-3<!-- fig:t.err -->, 6.5<!-- fig:t.err -->-7.0e-3") == []
    assert len(figures.check_markers("off by 6.5e-4<!-- fig:t.err -->")) == 1
    good = "took 0.648 ms<!-- fig:t.a.ms -->, copied 4,260 GB/s<!-- fig:t.b.gbps --> | 0.648<!-- fig:t.a.ms --> |"
    assert figures.check_markers(good) == []
    # a range: the hyphen before the second number is not a minus sign
    assert figures.check_markers("from 0.648<!-- fig:t.a.ms -->-4260 GB/s<!-- fig:t.b.gbps -->") == []
    assert len(figures.check_markers("a drop of -0.648 ms<!-- fig:t.a.ms -->")) == 1
    for bad in ["took 0.649 ms<!-- fig:t.a.ms -->", "took 10.648 ms<!-- fig:t.a.ms -->",
                "took 0.648 us<!-- fig:t.a.ms -->", "took 0.65 ms<!-- fig:t.a.ms -->",
                "took 0.648 ms<!-- fig:t.none -->"]:
        assert len(figures.check_markers(bad)) == 1, bad


def test_bad_entries_and_keys_are_refused_with_their_name(monkeypatch, tmp_path):
    monkeypatch.setattr(figures, "REGISTRY_DIR", tmp_path)
    with pytest.raises(TypeError, match="key"):
        figures.value(3)
    with pytest.raises(KeyError, match="nope"):
        figures.value("nope")
    for entry, message in [({"file": "x.json", "digits": 1, "unit": ""}, "path"),
                           ({"expr": "1", "digits": -1, "unit": ""}, "digits"),
                           ({"expr": "1", "file": "x.json", "path": [], "digits": 1, "unit": ""}, "exactly one"),
                           ({"expr": "1", "digits": 1}, "unit")]:
        (tmp_path / "a.json").write_text(json.dumps({"k.x": entry}))
        figures.clear_cache()
        with pytest.raises(ValueError, match=message):
            figures.registry()
    (tmp_path / "a.json").write_text(json.dumps({"k.x": {"expr": "__import__('os')", "digits": 0, "unit": ""}}))
    figures.clear_cache()
    with pytest.raises(ValueError, match="arithmetic"):
        figures.value("k.x")
    (tmp_path / "b.json").write_text(json.dumps({"k.x": {"expr": "2", "digits": 0, "unit": ""}}))
    figures.clear_cache()
    with pytest.raises(ValueError, match="both"):
        figures.registry()
