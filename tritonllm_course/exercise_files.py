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

Odd files are refused, never guessed at: an exercise that is a directory, a fifo or another file that is not
a regular one (never read: it could block forever), a symbolic link (never written through: it may point
anywhere), not UTF-8 text, read-only or in a read-only folder is an `ExerciseFileError` naming it; so is a
solution that is not a regular UTF-8 file. A UTF-8 byte-order mark and CRLF line endings are read as the text
they hold, so a file that differs only in them is left as it is. `update()` decides and checks every file
before it writes any, so a refusal leaves every exercise as it was; each write is atomic (`safe_files`), the
backup first, and a write that fails on the way (a full disk, a file gone) names the file and what was
already written. An exercise saved while it runs (the learner's editor, say) is left as saved, and named.
"""
from __future__ import annotations

import datetime
import difflib
import os
from pathlib import Path

from . import kernels, regions, safe_files

MAX_DIFF_LINES = 12   # of the diff `drifted()` shows per file


class ExerciseFileError(ValueError):
    """An exercise file the tools cannot read or write as it is (one line naming it)."""


def read_exercise(path: Path, root: Path | None = None) -> str | None:
    """The text of the exercise at `path`, None when it is missing; an `ExerciseFileError` naming it when it
    is a directory, a symbolic link, not UTF-8 text or unreadable, or naming its folder when that is a file."""
    rel = path.relative_to(root or kernels.course_root())
    if path.is_symlink():
        raise ExerciseFileError(f"{rel} is a symbolic link (to {os.readlink(path)}): exercises are regular files, "
                                "never written through a link; replace it with a copy of the file")
    if not path.exists():
        if path.parent.exists() and not path.parent.is_dir():   # not missing: nothing can be written there
            raise ExerciseFileError(f"{rel.parent} is a file, not a folder: move it away, then run make-exercises")
        return None
    if path.is_dir():
        raise ExerciseFileError(f"{rel} is a directory, not a file: move it away, then run make-exercises")
    return _decode(_read(path, rel, follow_links=False), rel)


def _read(path: Path, rel: Path, follow_links: bool) -> bytes:
    try:
        return safe_files.read_regular(path, follow_links)
    except safe_files.UnreadableFile as e:
        raise ExerciseFileError(str(e).replace(str(path), str(rel), 1)) from None


def _decode(data: bytes, rel: Path) -> str:
    """The text as read_text reads it (universal newlines), less a UTF-8 byte-order mark: an editor's way of
    saving the same code."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ExerciseFileError(f"{rel} is not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}): save it "
                                "as UTF-8 and run make-exercises again") from None


def fresh_exercises(root: Path | None = None) -> dict[Path, str]:
    """{exercise path: the text generated from its solution} for every solution module."""
    root = root or kernels.course_root()
    fresh = {}
    for path in sorted((root / "solutions").glob("*.py")):
        if path.name != "__init__.py":
            rel = path.relative_to(root)
            fresh[root / "exercises" / path.name] = regions.make_exercise(_decode(_read(path, rel, True), rel),
                                                                          path.stem)
    return fresh


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
    current = read_exercise(path, root)
    if current is None:
        return f"{rel} is missing: `tritonllm-course make-exercises` writes it"
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


def backup(path: Path, now: datetime.datetime | None = None, root: Path | None = None) -> Path:
    """Keep `path`, byte for byte, as `<path>.<YYYY-MM-DDTHHMM>.bak` beside it (`-2`, `-3`, ... if that
    exists), written as `safe_files` writes inside `root` (default: the course)."""
    root = root or kernels.course_root()
    target = _backup_name(path, now)
    safe_files.atomic_write_bytes(target, _read(path, path.relative_to(root), follow_links=False), root)
    return target


def _backup_name(path: Path, now: datetime.datetime | None) -> Path:
    stamp = (now or datetime.datetime.now()).strftime("%Y-%m-%dT%H%M")
    target, n = path.with_name(f"{path.name}.{stamp}.bak"), 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}.{stamp}-{n}.bak")
    return target


def _plan(path: Path, fresh: str, force: bool, root: Path) -> tuple[str, bool, str] | None:
    """(text to write, whether the file as it is must be kept first, the message with {kept} for the
    backup's name), or None when the exercise is left as it is."""
    rel = path.relative_to(root)
    current = read_exercise(path, root)
    if current is None:
        return fresh, False, f"wrote {rel} (new)"
    if current == fresh:
        return None
    if is_stub(current):
        return fresh, False, f"wrote {rel} (still unfilled: regenerated)"
    if force:
        return fresh, True, f"wrote {rel} unfilled (--force); your file is kept as {{kept}}"
    if not _differs_outside(current, fresh):
        return None   # filled in, the same as the solution everywhere else: the learner's file as it is
    merged = carry_over(current, fresh)
    if merged:
        return merged, True, (f"updated {rel} outside its regions with your code carried over; the file as it "
                              "was (with what you wrote outside the regions) is kept as {kept}")
    return fresh, True, (f"wrote {rel} fresh: {_mismatch(current, fresh)}; your file is kept as {{kept}}: "
                         "copy your code into the new regions")


def update(force: bool = False, root: Path | None = None, now: datetime.datetime | None = None) -> list[str]:
    """Bring exercises/ in step with solutions/ as the module doc says; one message per file written.
    Every exercise is read, decided and checked writable (with its backup) before any is written."""
    root = root or kernels.course_root()
    plans = []
    for path, fresh in fresh_exercises(root).items():
        before = _snapshot(path)   # what the plan is made from: a file saved after it is never overwritten
        if plan := _plan(path, fresh, force, root):
            plans.append((path, plan, before))
    try:
        for path, (_, keep, _), _ in plans:
            safe_files.check_writable(path, root)
            if keep:
                safe_files.check_writable(_backup_name(path, now), root)
    except safe_files.UnsafeWrite as e:
        raise ExerciseFileError(f"{e}; nothing was written") from None
    messages, changed = [], []
    for path, (text, keep, message), before in plans:
        if _snapshot(path) != before:   # saved (by the learner's editor, say) since it was read: kept as saved
            changed.append(str(path.relative_to(root)))
            continue
        try:   # each file whole (old or new); one that fails on the way stops the run, saying what was done
            kept = backup(path, now, root) if keep else None
            safe_files.atomic_write_text(path, text, root)
        except (safe_files.UnsafeWrite, ExerciseFileError, OSError) as e:
            said = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ExerciseFileError(f"{said}; {path.relative_to(root)} is left as it was; written before it: "
                                    f"{'; '.join(messages) or 'nothing'}") from None
        messages.append(message.replace("{kept}", str(kept.relative_to(root)) if kept else ""))
    if changed:
        raise ExerciseFileError(f"{', '.join(changed)} changed while make-exercises ran: left as it is now; run "
                                f"make-exercises again (written meanwhile: {'; '.join(messages) or 'nothing'})")
    return messages


def _snapshot(path: Path) -> bytes | None:
    """The exercise's bytes as they are now (None: missing or not a regular file, which `_plan` refuses)."""
    try:
        return safe_files.read_regular(path, follow_links=False)
    except safe_files.UnreadableFile:
        return None
