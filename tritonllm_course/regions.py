"""Solution regions: cut exercises out of solutions, detect unfilled ones, compare the two files.

In `solutions/<family>.py` the part a learner writes sits between

    # BEGIN SOLUTION: optional hint for the learner
    ...
    # END SOLUTION

A hint longer than one line goes on in a hint block: each line right after a BEGIN line with a hint that,
at the marker's indentation, starts with `#` and at least three spaces, then text, continues it:

    # BEGIN SOLUTION: a hint that needs more room than one line
    #   goes on here, and on as many such lines as it needs
    ...

The first other line (code, a blank line, a comment with fewer spaces after its `#`) starts the body.
The hint is its lines joined by single spaces. `make_exercise()` turns each region into

    # BEGIN EXERCISE: optional hint for the learner
    #   (the hint block as it is in the solution)
    raise NotImplementedError("exercise <family>.py, <function>: not implemented yet")
    # END EXERCISE

which keeps the module importable and shows the learner the whole hint. The learner replaces the `raise`
line with code; the hint block belongs to the marker and stays. The stub names the function around the
region, not its line: a line added above the region in the solution leaves the stub as it is, so a
learner's filled-in region merges with an updated exercise (a student branch) without a conflict. `mask()`
blanks the inside of every region of either kind, so a filled-in exercise still compares equal to its
solution everywhere else: that is the drift test.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN (?P<kind>SOLUTION|EXERCISE)(?::[ \t]*(?P<hint>.*))?$")
END = re.compile(r"^[ \t]*# END (?P<kind>SOLUTION|EXERCISE)[ \t]*$")
HINT_MORE = "#   "   # after the marker's indentation: a line of the hint block
STUB_TAG = "not implemented yet"


class RegionError(ValueError):
    pass


@dataclass
class Region:
    kind: str        # SOLUTION or EXERCISE
    begin: int       # 0-based line index of the BEGIN marker
    end: int         # 0-based line index of the END marker
    indent: str
    hint: str        # the whole hint, its lines joined by single spaces
    body: list[str]  # every line between the markers: the hint block's lines first, then the code
    more: int = 0    # how many lines of the body continue the hint (the hint block)

    @property
    def hint_block(self) -> list[str]:
        """The lines after the BEGIN line that continue its hint."""
        return self.body[:self.more]

    @property
    def code(self) -> list[str]:
        """The body after the hint block: what the learner writes."""
        return self.body[self.more:]

    @property
    def unfilled(self) -> bool:
        return any(STUB_TAG in line and "NotImplementedError" in line for line in self.code)


def _hint(first: str | None, body: list[str], indent: str) -> tuple[str, int]:
    """The whole hint of a region whose BEGIN line at `indent` gives `first`, and how many lines at the
    top of its `body` continue it."""
    words = [(first or "").strip()]
    for line in body if words[0] else []:
        if not (line.startswith(indent + HINT_MORE) and line[len(indent) + len(HINT_MORE):].strip()):
            break
        words.append(line.strip()[1:].strip())
    return " ".join(words), len(words) - 1


def regions(text: str, where: str = "<source>") -> list[Region]:
    lines = text.splitlines()
    found, open_ = [], None
    for i, line in enumerate(lines):
        if m := BEGIN.match(line):
            if open_ is not None:
                raise RegionError(f"{where}:{i + 1}: BEGIN inside the region opened at line {open_[0] + 1}")
            open_ = (i, m)
        elif m := END.match(line):
            if open_ is None:
                raise RegionError(f"{where}:{i + 1}: END without BEGIN")
            b, bm = open_
            if bm["kind"] != m["kind"]:
                raise RegionError(f"{where}:{i + 1}: END {m['kind']} closes BEGIN {bm['kind']} (line {b + 1})")
            body = lines[b + 1:i]
            hint, more = _hint(bm["hint"], body, bm["indent"])
            found.append(Region(bm["kind"], b, i, bm["indent"], hint, body, more))
            open_ = None
    if open_ is not None:
        raise RegionError(f"{where}:{open_[0] + 1}: BEGIN without END")
    return found


def make_exercise(solution_text: str, family: str) -> str:
    """The exercise file for one solution file."""
    lines = solution_text.splitlines()
    regs = regions(solution_text, f"solutions/{family}.py")
    if not regs:
        raise RegionError(f"solutions/{family}.py has no '# BEGIN SOLUTION' region")
    tree = ast.parse(solution_text)
    out, pos = [], 0
    for r in regs:
        if r.kind != "SOLUTION":
            raise RegionError(f"solutions/{family}.py:{r.begin + 1}: solutions must use SOLUTION markers")
        out += lines[pos:r.begin]
        first = (BEGIN.match(lines[r.begin])["hint"] or "").strip()
        out.append(f"{r.indent}# BEGIN EXERCISE{f': {first}' if first else ''}")
        out += [line.rstrip() for line in r.hint_block]
        where = enclosing_function(tree, r.begin + 1)
        out.append(f'{r.indent}raise NotImplementedError("exercise {family}.py{f", {where}" if where else ""}: '
                   f'{STUB_TAG}")')
        out.append(f"{r.indent}# END EXERCISE")
        pos = r.end + 1
    out += lines[pos:]
    return "\n".join(out) + "\n"


def mask(text: str, where: str = "<source>") -> str:
    """The text with every region's inside replaced by one placeholder line, markers normalised."""
    lines = text.splitlines()
    out, pos = [], 0
    for r in regions(text, where):
        out += lines[pos:r.begin]
        out.append(f"{r.indent}# BEGIN REGION: {r.hint}".rstrip())
        out.append(f"{r.indent}# END REGION")
        pos = r.end + 1
    out += lines[pos:]
    return "\n".join(out) + "\n"


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def enclosing_function(tree: ast.Module, line: int) -> str | None:
    """The module-level function whose body holds 1-based `line`."""
    for name, node in _functions(tree).items():
        if node.lineno <= line <= node.end_lineno:
            return name
    return None


def call_closure(text: str, function: str) -> set[str]:
    """`function` and every module-level function it uses, directly or through others."""
    funcs = _functions(ast.parse(text))
    seen, todo = set(), [function]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        todo += [n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name) and n.id in funcs]
    return seen


def unfilled_regions(path: Path, only: set[str] | None = None) -> list[Region]:
    """The exercise regions of `path` still holding their stub; `only`: those inside these functions."""
    text = path.read_text()
    todo = [r for r in regions(text, str(path)) if r.kind == "EXERCISE" and r.unfilled]
    if only is None:
        return todo
    tree = ast.parse(text)
    return [r for r in todo if enclosing_function(tree, r.begin + 1) in only]
