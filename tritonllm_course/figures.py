"""The registry of measured figures: every number the course quotes, named by key and read from its record.

The files under ``results/`` and ``lab/results/`` are the source of truth. ``results/figures/*.json`` map a
key (dotted, lowercase: ``decode.fast_pdl.ctx128.ms``) to an entry of one of two kinds:

- a record entry, ``{"file": "results/.../bench.json", "path": ["rows", 7, "decode_ms", "128"], "digits": 3,
  "unit": "ms"}``: ``path`` walks the JSON record by key (a string) or index (an integer). A path element may
  also be an object, ``{"system": "transformers + compile"}``, which picks the one element of a list whose
  fields equal those values, so an entry survives a rerun that reorders the rows;
- a computed entry, ``{"expr": "100 * a / b", "args": {"a": "<key>", "b": "<key>"}, "digits": 1, "unit": "%"}``:
  the arithmetic (ratios, percentages, bytes over time) is done here, never typed. An argument is a key or an
  inline record entry (``{"file": ..., "path": [...]}``) for an operand nobody quotes on its own.

``value(key)`` is the number, ``text(key)`` the number as the course writes it (``"0.648 ms"``) and
``cite(key)`` adds the GPU, the date and the file (``"0.648 ms (H200, 2026-12-02, results/...)"``); the GPU
and date are read from the record's ``gpu`` and ``date`` fields, or from its file name.

In prose (notebook markdown, ``docs/*.md``, ``README.md``) a figure is its text followed by a marker,
``0.648 ms<!-- fig:KEY -->``; a bare number (``0.648<!-- fig:KEY -->``, for a table
whose header names the unit) is accepted too. ``check_markers`` is what ``tests/measure/test_figures.py`` runs over
every such file: the key must exist, its record must resolve, and the number written must be the number
``text`` gives, so a stale quote fails as soon as its record changes.
"""

from __future__ import annotations

import ast
import io
import json
import math
import operator
import re
import tokenize
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_DIR = ROOT / "results" / "figures"

# Units written flush against the number (``"56.1%"``, ``"6.1x"``, a power of ten: ``"1.7e-3"`` from unit
# ``"e-3"``, the entry scaling its value by the inverse power in `expr`); every other unit follows a space
# (``"0.648 ms"``).
_FLUSH_UNITS = ("%", "x", "e-")

_MARKER = re.compile(r"<!--\s*fig:([a-z0-9_.\-]+)\s*-->")
# Thousands separators are allowed in prose (``"4,260 GB/s"``); they are dropped before comparing.
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# A minus sign only where a word could start ("| -4.0", "(-3)"); "618-622" is a range, not -622.
_NUMBER_AT_END = re.compile(r"(?<![\d.])(?:(?<![^\s(|])-)?\d+(?:\.\d+)?$")


def _registry_files() -> list[Path]:
    return sorted(REGISTRY_DIR.glob("*.json"))


@lru_cache(maxsize=None)
def registry() -> dict[str, dict]:
    """Every key of every ``results/figures/*.json``; a key defined in two files is an error."""
    entries: dict[str, dict] = {}
    origin: dict[str, str] = {}
    for path in _registry_files():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path.relative_to(ROOT)}: not valid JSON ({err})") from err
        if not isinstance(data, dict):
            raise ValueError(f"{path.relative_to(ROOT)}: must map figure keys to entries")
        for key, entry in data.items():
            if key in entries:
                raise ValueError(f"figure key {key!r} is defined in both {origin[key]} and {path.name}")
            _validate_entry(key, entry, where=path.name)
            entries[key] = entry
            origin[key] = path.name
    return entries


def _validate_entry(key: str, entry: Any, where: str) -> None:
    if not re.fullmatch(r"[a-z0-9_\-]+(\.[a-z0-9_\-]+)*", key):
        raise ValueError(f"{where}: figure key {key!r} must be dotted lowercase words")
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: figure {key!r} must be an object")
    if ("file" in entry) == ("expr" in entry):
        raise ValueError(f"{where}: figure {key!r} needs exactly one of 'file' (with 'path') or 'expr'")
    if "file" in entry and not isinstance(entry.get("path"), list):
        raise ValueError(f"{where}: figure {key!r} needs 'path', a list of keys and indices into its record")
    if "expr" in entry and not isinstance(entry.get("args", {}), dict):
        raise ValueError(f"{where}: figure {key!r}: 'args' must map names in 'expr' to figure keys")
    digits = entry.get("digits")
    if not isinstance(digits, int) or isinstance(digits, bool) or digits < 0:
        raise ValueError(f"{where}: figure {key!r} needs 'digits', a non-negative integer")
    if not isinstance(entry.get("unit"), str):
        raise ValueError(f"{where}: figure {key!r} needs 'unit', a string ('' for none)")


def _entry(key: str) -> dict:
    if not isinstance(key, str):
        raise TypeError(f"key must be a figure key (str), got {type(key).__name__}")
    entries = registry()
    if key not in entries:
        raise KeyError(f"no figure {key!r} in results/figures/*.json")
    return entries[key]


@lru_cache(maxsize=None)
def record(file: str) -> Any:
    """The JSON record at ``file`` (relative to the repository root), loaded once."""
    path = ROOT / file
    if not path.is_file():
        raise FileNotFoundError(f"record {file} does not exist")
    if path.suffix != ".json":
        raise ValueError(f"record {file}: figures are read from JSON records only")
    return json.loads(path.read_text())


def _descend(node: Any, path: list, key: str, file: str) -> Any:
    """Follow ``path`` (keys, indices, field matches) from ``node``, the record loaded from ``file``."""
    for step in path:
        if isinstance(step, dict):
            if not isinstance(node, list):
                raise ValueError(f"figure {key!r}: {file} at {step}: a field match needs a list")
            hits = [x for x in node if isinstance(x, dict) and all(x.get(k) == v for k, v in step.items())]
            if len(hits) != 1:
                raise ValueError(f"figure {key!r}: {file}: {len(hits)} rows match {step} (need exactly one)")
            node = hits[0]
        elif isinstance(step, bool) or not isinstance(step, (str, int)):
            raise ValueError(f"figure {key!r}: path element {step!r} must be a key, an index or a field match")
        else:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError) as err:
                raise ValueError(f"figure {key!r}: {file} has no {step!r} at path {path}") from err
    return node


def _walk(file: str, path: list, key: str) -> Any:
    return _descend(record(file), path, key, file)


def _number(node: Any, key: str, file: str) -> float:
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise TypeError(f"figure {key!r}: {file} holds {node!r} there, not a number")
    return float(node)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
_FUNCTIONS = {"min": min, "max": max, "abs": abs}


def _evaluate(expr: str, names: dict[str, float], key: str) -> float:
    """Arithmetic only (numbers, names, + - * / **, min/max/abs): an entry is data, never code."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"figure {key!r}: 'expr' uses {node.id!r}, which is not in 'args'")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
                and not node.keywords:
            return float(_FUNCTIONS[node.func.id](*[ev(a) for a in node.args]))
        raise ValueError(f"figure {key!r}: 'expr' may hold only arithmetic, not {ast.dump(node)[:60]}")

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"figure {key!r}: 'expr' {expr!r} is not an expression") from err
    return ev(tree)


def _argument(arg: Any, key: str, seen: tuple[str, ...]) -> float:
    if isinstance(arg, str):
        return _value(arg, seen)
    if isinstance(arg, dict) and "file" in arg and isinstance(arg.get("path"), list):
        return _number(_walk(arg["file"], arg["path"], key), key, arg["file"])
    raise ValueError(f"figure {key!r}: an argument must be a figure key or {{'file', 'path'}}, got {arg!r}")


def _value(key: str, seen: tuple[str, ...] = ()) -> float:
    if key in seen:
        raise ValueError(f"figure {key!r} depends on itself through {' -> '.join(seen)}")
    entry = _entry(key)
    if "file" in entry:
        return _number(_walk(entry["file"], entry["path"], key), key, entry["file"])
    names = {name: _argument(arg, key, seen + (key,)) for name, arg in entry.get("args", {}).items()}
    result = _evaluate(entry["expr"], names, key)
    if not math.isfinite(result):
        raise ValueError(f"figure {key!r}: 'expr' gives {result}")
    return result


def value(key: str) -> float:
    """The figure's number, read from its record (or computed from other figures)."""
    return _value(key)


def _format(number: float, digits: int, unit: str) -> str:
    written = f"{number:.{digits}f}"
    if written.startswith("-") and float(written) == 0:
        written = written[1:]
    if not unit:
        return written
    return f"{written}{unit}" if unit.startswith(_FLUSH_UNITS) else f"{written} {unit}"


def text(key: str) -> str:
    """The figure as prose writes it: its number rounded to the entry's digits, then its unit."""
    entry = _entry(key)
    return _format(value(key), entry["digits"], entry["unit"])


def number_text(key: str) -> str:
    """The number of ``text(key)`` without its unit (what a table cell under a unit header holds)."""
    entry = _entry(key)
    return _format(value(key), entry["digits"], "")


def files(key: str) -> list[str]:
    """The record files a figure is read from, in order of first use (several for a computed figure)."""
    out: list[str] = []

    def visit(k: str, seen: tuple[str, ...]) -> None:
        if k in seen:
            raise ValueError(f"figure {k!r} depends on itself through {' -> '.join(seen)}")
        entry = _entry(k)
        if "file" in entry:
            if entry["file"] not in out:
                out.append(entry["file"])
            return
        for arg in entry.get("args", {}).values():
            if isinstance(arg, str):
                visit(arg, seen + (k,))
            elif isinstance(arg, dict) and arg.get("file") not in out:
                out.append(arg["file"])

    visit(key, ())
    return out


def _gpu_and_date(file: str) -> tuple[str, str]:
    data = record(file)
    gpu = data.get("gpu") if isinstance(data, dict) else None
    date = data.get("date") if isinstance(data, dict) else None
    named = re.findall(r"([a-z]+-[a-z0-9]+(?:-[a-z0-9]+)*)_(\d{4}-\d{2}-\d{2})", file)
    if named:
        gpu = gpu or named[-1][0]
        date = date or named[-1][1]
    if not gpu or not date:
        raise ValueError(f"record {file} names no GPU and date (fields 'gpu', 'date' or its file name)")
    short = re.sub(r"^(nvidia[- ])", "", str(gpu), flags=re.IGNORECASE).upper()
    return short, str(date)


def cite(key: str) -> str:
    """``text(key)`` with where it was measured: ``"0.648 ms (H200, 2026-12-02, results/...)"``."""
    sources = files(key)
    stamps = []
    for file in sources:
        stamp = _gpu_and_date(file)
        if stamp not in stamps:
            stamps.append(stamp)
    where = "; ".join(f"{gpu}, {date}" for gpu, date in stamps)
    return f"{text(key)} ({where}, {'; '.join(sources)})"


def check_markers(source: str, name: str = "<text>") -> list[str]:
    """Every problem with the figure markers in ``source``: unknown key, unresolvable record, wrong number.

    The number written right before a marker (its unit after it, or none) must equal ``text(key)``'s.
    """
    problems = []
    for match in _MARKER.finditer(source):
        key = match.group(1)
        line = source.count("\n", 0, match.start()) + 1
        where = f"{name}:{line}: fig:{key}"
        try:
            want = text(key)
            want_number = number_text(key)
        except (KeyError, ValueError, TypeError, FileNotFoundError) as err:
            problems.append(f"{where}: {err}")
            continue
        before = source[max(0, match.start() - 80):match.start()].rstrip(" ")
        before = _THOUSANDS.sub("", before).replace("\u2212", "-")
        if before.endswith(want) and not _glued(before, len(before) - len(want)):
            continue
        found = _NUMBER_AT_END.search(before)
        if found and found.group(0) == want_number:
            continue
        written = before.rstrip()[-24:].split("\n")[-1]
        problems.append(f"{where}: written '...{written}', the record gives {want}")
    return problems


# The units of a measurement: a time, a bandwidth, a throughput, a speed ratio written flush (``"6.1x"``, never
# the "128 x 64" of a shape) or a percentage. "s" alone is a time (``"0.43 s"``); "tokens/s" is tried before it;
# a time per something counts (``"0.648 ms/token"``).
_MEASURE_UNIT = (r"(?:\s?(?:TFLOP/s|GFLOP/s|TFLOPS|GFLOPS|GB/s|TB/s|MB/s|tokens/s|tok/s|ns|us|µs|μs|ms|s|%)"
                 r"(?!\w)|[x×](?!\w)(?!\s*\d))")
# A number as prose writes it: thousands separated by commas ("4,262") or not, not part of a word ("H200",
# "fp8"), a version, a path or a name ("gelu-tanh-3x").
_PROSE_NUMBER = r"(?<![\w.,/])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|(?<![\w.,/])(?<![A-Za-z]-)\d+(?:\.\d+)?"
# What may follow a figure: its record (fig:KEY), or a declaration that it is no measurement of the course
# (not-measured: REASON, e.g. a source article's figure, a data sheet's, an estimate), or that it is one whose
# data was not saved (unsaved: YYYY-MM-DD, the day it was measured).
_ANY_MARK = (r"<!--\s*(?:fig:[a-z0-9_.\-]+|not-measured:\s*[^\s>][^>]*?|unsaved:\s*\d{4}-\d{2}-\d{2})\s*-->")
_DECLARATION_START = re.compile(r"<!--\s*(?:not-measured|unsaved)\b[^>]*-->")
_DECLARATION = re.compile(r"<!--\s*(?:not-measured:\s*[^\s>][^>]*?|unsaved:\s*\d{4}-\d{2}-\d{2})\s*-->")
_ITEM = rf"(?:{_PROSE_NUMBER})(?:{_MEASURE_UNIT})?(?:\s*{_ANY_MARK})?"
# A range or a comparison shares the last number's unit (``"8-20 us"``, ``"9.7 vs 10.7 us"``): each number of it
# is a figure. "and", "or" and commas join only figures that carry their own unit (``"T = 128, 2.1 us"`` is a
# shape, then a time).
_JOINED = re.compile(rf"{_ITEM}(?:\s*(?:-|–|—|to|vs\.?)\s*{_ITEM}"
                     rf"|\s*(?:,|and|or)\s*(?=(?:{_PROSE_NUMBER})(?:{_MEASURE_UNIT})){_ITEM})*")
_LISTING = {",", "and", "or"}
_ITEM_RE = re.compile(rf"(?P<num>{_PROSE_NUMBER})(?P<unit>{_MEASURE_UNIT})?(?:\s*(?P<mark>{_ANY_MARK}))?")
_CODE_BLOCK = re.compile(r"```.*?```|~~~.*?~~~", re.S)
_CODE_SPAN = re.compile(r"(`+)[^`\n].*?\1", re.S)
# Where a link points and an anchor's name are addresses, not prose (``"(#gpt2-1381x)"``, ``'<a id="gelu-3x">'``).
_ADDRESS = re.compile(r"\]\([^)\s]*\)|<a\s[^>]*>")
_OTHER_COMMENT = re.compile(r"<!--(?!\s*(?:fig:|not-measured|unsaved)).*?-->", re.S)


def _blanked(match: re.Match) -> str:
    """The match as spaces, its newlines kept, so that line numbers and offsets survive."""
    return re.sub(r"[^\n]", " ", match.group(0))


def unmarked_figures(source: str, name: str = "<text>") -> list[str]:
    """Every figure of a measurement in ``source`` (prose: markdown) that nothing vouches for.

    A number followed by a measurement's unit (us, ms, s, GB/s, TFLOP/s, a flush "x", "%") must be followed
    by ``<!-- fig:KEY -->`` (its record; ``check_markers`` checks the number), or by a declaration:
    ``<!-- not-measured: REASON -->`` (a source article's figure, a data sheet's, an estimate) or
    ``<!-- unsaved: 2026-12-01 -->`` (measured that day, written YYYY-MM-DD, its data not kept). A declaration
    after a range (``"8-20 us"``) covers each number of it; a ``fig:`` marker covers only the number it follows.
    Code spans and code blocks are code, not prose, and are skipped; so are other HTML comments, link targets
    and anchors. Each problem names ``name``, the line and what is written.
    """
    problems = []
    for bad in _DECLARATION_START.finditer(source):
        if not _DECLARATION.fullmatch(bad.group(0)):
            line = source.count("\n", 0, bad.start()) + 1
            problems.append(f"{name}:{line}: malformed declaration {bad.group(0)!r} (want "
                            "'<!-- not-measured: REASON -->' or '<!-- unsaved: YYYY-MM-DD -->')")
    prose = _CODE_BLOCK.sub(_blanked, source)
    prose = _CODE_SPAN.sub(_blanked, prose)
    prose = _OTHER_COMMENT.sub(_blanked, prose)
    prose = _ADDRESS.sub(_blanked, prose)
    for joined in _JOINED.finditer(prose):
        text_of = joined.group(0)
        items = list(_ITEM_RE.finditer(text_of))
        for i in range(len(items) - 1, 0, -1):
            # "and", "or" or a comma after a number without a unit: that number is not of this figure
            if not items[i - 1].group("unit") and text_of[items[i - 1].end():items[i].start()].strip() in _LISTING:
                items = items[i:]
                break
        group: list[re.Match] = []
        for item in items:
            group.append(item)
            if not item.group("unit"):
                continue
            # one figure: the numbers sharing this unit, then the unit; numbers after the last unit are not
            # figures (``"2.1 us<!-- fig:KEY -->, 2026"``)
            figure, group = group, []
            closing = figure[-1].group("mark") or ""
            if closing and not re.match(r"<!--\s*fig:", closing):
                continue  # a declaration closing a range covers each number of it
            if all(number.group("mark") for number in figure):
                continue
            line = prose.count("\n", 0, joined.start() + figure[0].start()) + 1
            written = " ".join(text_of[figure[0].start():figure[-1].end()].split())
            problems.append(f"{name}:{line}: '{written}' is a measured figure with no marker (add "
                            "<!-- fig:KEY -->, <!-- not-measured: REASON --> or <!-- unsaved: YYYY-MM-DD -->)")
    return problems


def code_prose(source: str) -> str:
    """The comments and docstrings of Python ``source`` (the prose a reader of the code takes as fact), everything
    else blanked to spaces with its newlines kept, so that ``unmarked_figures`` and ``check_markers`` name the
    file's own line numbers. A docstring is a string statement of its own (a module's, a class's, a function's
    or one after an assignment); other strings are code."""
    starts = [0]
    for line in io.StringIO(source).readlines():          # split at "\n" only, as tokenize counts lines
        starts.append(starts[-1] + len(line))
    # a docstring's first token starts where its statement does (indentation is ASCII, so ast's byte column is
    # tokenize's character column)
    docstrings = {(node.lineno, node.col_offset) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)}
    keep = [(token.start, token.end) for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.start in docstrings)]
    out = [c if c == "\n" else " " for c in source]
    for (row0, col0), (row1, col1) in keep:
        begin, end = starts[row0 - 1] + col0, starts[row1 - 1] + col1
        out[begin:end] = source[begin:end]
    return "".join(out)


def _glued(text: str, start: int) -> bool:
    """Whether the number starting at `start` continues one before it (a digit or a point) or carries a minus
    sign (a hyphen where a word could start; "618-622" is a range)."""
    if start == 0:
        return False
    ahead = text[start - 1]
    if ahead.isdigit() or ahead == ".":
        return True
    return ahead in "-\u2212" and (start == 1 or text[start - 2] in " \t\n(|")


def markers(source: str) -> list[str]:
    """The figure keys marked in ``source``, in order."""
    return [m.group(1) for m in _MARKER.finditer(source)]


def clear_cache() -> None:
    """Forget the loaded registry and records (after a record or a registry file changed on disk)."""
    registry.cache_clear()
    record.cache_clear()
