"""exercises/ kept in step with solutions/ without ever losing a learner's code.

`update()` (`tritonllm-course make-exercises`) decides per exercise file:
  missing, or every region still its stub   written from the solution: nothing of the learner's is in it
  filled in, same outside the regions       left alone
  filled in, different outside the regions  the fresh exercise with the learner's region bodies carried
                                            over, when the regions still correspond (same number, hints
                                            and indentation, in order); else the fresh exercise
`force`: every exercise rewritten unfilled. Wherever a file holding learner code is replaced, the file as
it was is kept beside it first, `exercises/<family>.py.<YYYY-MM-DDTHHMM>.bak` (not a `.py`, so never
imported as a kernel module), and the message says where. `drifted()` (`make-exercises --check`) names
each drifted exercise, the lines that differ (a short diff) and what `update()` would do about it.
"""
from __future__ import annotations

import datetime
import difflib
from pathlib import Path

from . import kernels, regions

MAX_DIFF_LINES = 12   # of the diff `drifted()` shows per file


def fresh_exercises(root: Path | None = None) -> dict[Path, str]:
    """{exercise path: the text generated from its solution} for every solution module."""
    root = root or kernels.course_root()
    return {root / "exercises" / p.name: regions.make_exercise(p.read_text(), p.stem)
            for p in sorted((root / "solutions").glob("*.py")) if p.name != "__init__.py"}


def _stub_body(body: list[str]) -> bool:
    code = [line for line in body if line.strip()]
    return bool(code) and all(regions.STUB_TAG in line and "NotImplementedError" in line for line in code)


def _exercise_regions(text: str, where: str) -> list[regions.Region] | None:
    """The EXERCISE regions of a learner's file; None when its markers are broken."""
    try:
        return [r for r in regions.regions(text, where) if r.kind == "EXERCISE"]
    except regions.RegionError:
        return None


def is_stub(text: str) -> bool:
    """Every region of the exercise still holds only its stub (a broken file is not a stub)."""
    regs = _exercise_regions(text, "<exercise>")
    return bool(regs) and all(_stub_body(r.code) for r in regs)


def _mismatch(current: str, fresh: str) -> str | None:
    """Why the learner's regions no longer correspond to the fresh exercise's, or None when they do."""
    mine, theirs = _exercise_regions(current, "<exercise>"), regions.regions(fresh)
    if mine is None:
        return "its region markers are broken"
    if len(mine) != len(theirs):
        return f"it has {len(mine)} regions, the solution {len(theirs)}"
    for i, (a, b) in enumerate(zip(mine, theirs), 1):
        if (a.hint, a.indent) != (b.hint, b.indent):
            return f"region {i} (line {a.begin + 1}) has another hint or indentation in the solution"
    return None


def carry_over(current: str, fresh: str) -> str | None:
    """`fresh` with the filled-in region bodies of `current` (below the fresh hint blocks); None when the
    regions do not correspond. A region still holding its stub gets the fresh stub."""
    if _mismatch(current, fresh):
        return None
    lines, out, pos = fresh.splitlines(), [], 0
    for mine, new in zip(_exercise_regions(current, "<exercise>"), regions.regions(fresh)):
        out += lines[pos:new.begin + 1 + new.more]
        out += new.code if _stub_body(mine.code) else mine.code
        pos = new.end
    out += lines[pos:]
    return "\n".join(out) + "\n"


def _differs_outside(current: str, fresh: str) -> bool:
    try:
        return regions.mask(current) != regions.mask(fresh)
    except regions.RegionError:
        return True


def _changed_lines(a: list[str], b: list[str]) -> str:
    """The lines of `a` that differ from `b`, as "12, 40-41, after 57"."""
    spans = []
    for op, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        spans.append(f"after {i1}" if i1 == i2 else str(i1 + 1) if i2 == i1 + 1 else f"{i1 + 1}-{i2}")
    return ", ".join(spans)


def _diff(a: str, b: str, name_a: str, name_b: str) -> list[str]:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), name_a, name_b, n=1, lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)"]
    return lines


def describe(path: Path, fresh: str, root: Path | None = None) -> str | None:
    """What differs between the exercise at `path` and its fresh text, and how to resolve it without
    losing anything; None when nothing needs doing."""
    rel = path.relative_to(root or kernels.course_root())
    if not path.exists():
        return f"{rel} is missing: `tritonllm-course make-exercises` writes it"
    current = path.read_text()
    if not _differs_outside(current, fresh):
        return None
    target = fresh if is_stub(current) else carry_over(current, fresh)
    if target is None:   # compare with every region's inside blanked: their bodies cannot be matched up
        broken = _exercise_regions(current, str(rel)) is None
        a, b = (current, fresh) if broken else (regions.mask(current), regions.mask(fresh))
        label = "of yours" if broken else "of yours with every region's inside blanked"
        why = _mismatch(current, fresh)
        fix = (f"`tritonllm-course make-exercises` writes the fresh exercise and keeps this file as "
               f"{rel}.<date>.bak; then copy your code into the new regions")
    else:
        a, b, label = current, target, "of yours"
        why = None
        fix = ("`tritonllm-course make-exercises` regenerates it (still unfilled: nothing of yours in it)"
               if target is fresh else
               "`tritonllm-course make-exercises` writes the fresh file with your region bodies carried "
               f"over and keeps this one as {rel}.<date>.bak (what you wrote outside the regions is only there)")
    spans = _changed_lines(a.splitlines(), b.splitlines())
    head = (f"{rel} differs from solutions/{path.name} outside the exercise regions "
            f"({'lines' if ',' in spans or '-' in spans else 'line'} {spans} {label})")
    if why:
        head += f"; {why}"
    return "\n".join([head + ":", *(f"    {line}" for line in _diff(a, b, f"{rel} (yours)",
                                                                    f"{rel} (fresh)")), f"  to fix: {fix}"])


def drifted(root: Path | None = None) -> list[str]:
    """One description (`describe`) per exercise that is missing or differs outside its regions."""
    root = root or kernels.course_root()
    return [d for path, fresh in fresh_exercises(root).items() if (d := describe(path, fresh, root))]


def backup(path: Path, now: datetime.datetime | None = None) -> Path:
    """Copy `path` to `<path>.<YYYY-MM-DDTHHMM>.bak` beside it (`-2`, `-3`, ... if that exists)."""
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%dT%H%M")
    target, n = path.with_name(f"{path.name}.{stamp}.bak"), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{stamp}-{n}.bak")
    target.write_text(path.read_text())
    return target


def update(force: bool = False, root: Path | None = None, now: datetime.datetime | None = None) -> list[str]:
    """Bring exercises/ in step with solutions/ as the module doc says; one message per file written."""
    root = root or kernels.course_root()
    messages = []
    for path, fresh in fresh_exercises(root).items():
        rel = path.relative_to(root)
        if not path.exists():
            path.write_text(fresh)
            messages.append(f"wrote {rel} (new)")
            continue
        current = path.read_text()
        if current == fresh:
            continue
        if is_stub(current):
            path.write_text(fresh)
            messages.append(f"wrote {rel} (still unfilled: regenerated)")
            continue
        if force:
            kept = backup(path, now)
            path.write_text(fresh)
            messages.append(f"wrote {rel} unfilled (--force); your file is kept as {kept.relative_to(root)}")
            continue
        if not _differs_outside(current, fresh):
            continue   # filled in, the same as the solution everywhere else: the learner's file as it is
        merged = carry_over(current, fresh)
        kept = backup(path, now)
        path.write_text(merged or fresh)
        if merged:
            messages.append(f"updated {rel} outside its regions with your code carried over; the file as it was "
                            f"(with what you wrote outside the regions) is kept as {kept.relative_to(root)}")
        else:
            messages.append(f"wrote {rel} fresh: {_mismatch(current, fresh)}; your file is kept as "
                            f"{kept.relative_to(root)}: copy your code into the new regions")
    return messages
