"""How the course's tools write files: never through a symbolic link, never outside the folder they write in,
and atomically, so that no crash, full disk or refusal leaves a file half written.

`atomic_write_text(path, text, root)` (and `atomic_write_bytes`) refuse, with an `UnsafeWrite` naming the
file, a `path` that is not inside `root`, that goes through a symbolic link anywhere below `root` (the file
itself or a folder on the way), that is a directory, or that exists read-only (the learner's way of saying
"leave it"). Otherwise the data goes to a temporary file in the same folder, which then replaces `path` in one
`os.replace`: a reader sees the old file or the new one, never a mix, and a link planted at `path` after the
check is replaced, never followed. A new file gets the usual permissions (0666 less the umask), an existing
one keeps its own. `check_writable` runs the same checks without writing, so a tool can check every file it
is about to write before it writes any.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


class UnsafeWrite(ValueError):
    """A file the tool will not write (one line naming it and saying why)."""


def umask() -> int:
    """The process's umask (os.umask can only set it: it is set and put back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _writable(path: Path) -> bool:
    """Writable by this process, and not marked read-only by its owner (which root would otherwise ignore)."""
    return bool(path.stat().st_mode & 0o222) and os.access(path, os.W_OK)


def _inside(path: Path, root: Path) -> Path:
    """`path` relative to `root` (both taken as given, then with `root`'s links resolved); refuses `..`."""
    if ".." in path.parts:   # `..` after a link goes up from the link's target: never guessed at
        raise UnsafeWrite(f"{path}: a path with '..' in it is not written")
    path = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(root)), Path(root).resolve()):
        try:
            return path.relative_to(base)
        except ValueError:
            continue
    raise UnsafeWrite(f"{path} is outside {root}: not written")


def check_writable(path: str | Path, root: str | Path) -> Path:
    """The real location `path` would be written at (inside `root`, with `root`'s own links resolved), or an
    `UnsafeWrite` saying why it is not written. Nothing is written."""
    rel = _inside(Path(path), Path(root))
    if not rel.parts:
        raise UnsafeWrite(f"{path} is the folder {root} itself, not a file in it")
    real = Path(root).resolve()
    if not real.is_dir():
        raise UnsafeWrite(f"{path}: its folder {root} is not a directory")
    for i, part in enumerate(rel.parts):
        real = real / part
        shown = Path(root) / Path(*rel.parts[:i + 1])
        if real.is_symlink():
            raise UnsafeWrite(f"{shown} is a symbolic link (to {os.readlink(real)}): it is never written through; "
                              "replace it with a regular file or folder")
        last = i == len(rel.parts) - 1
        if not last and real.exists() and not real.is_dir():
            raise UnsafeWrite(f"{shown} is not a directory, so {path} cannot be written")
    if real.is_dir():
        raise UnsafeWrite(f"{path} is a directory, not a file: move it away first")
    if real.exists() and not _writable(real):
        raise UnsafeWrite(f"{path} is read-only: not written (make it writable to let the tool update it)")
    folder = real.parent
    while not folder.exists():   # the folders still to be made are made in the nearest one that exists
        folder = folder.parent
    if not _writable(folder):
        raise UnsafeWrite(f"{path} cannot be written: its folder {folder} is read-only")
    return real


def atomic_write_bytes(path: str | Path, data: bytes, root: str | Path | None = None,
                       mode: int | None = None) -> Path:
    """Write `data` to `path` inside `root` as the module doc says; missing folders below `root` are made.
    `root` defaults to `path`'s own folder (a results folder given on the command line: only the file itself
    must be no link). `mode`: the new file's permission bits (default: an existing file's, else 0666 less
    the umask). Returns the real path written."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    if root is None:   # the folder as named (links and '..' in it are the caller's choice), the file no link
        root = Path(path).parent.resolve()
        path = root / Path(path).name
    real = check_writable(path, root)
    try:
        old = real.stat().st_mode & 0o7777 if real.exists() else None
        real.parent.mkdir(parents=True, exist_ok=True)
        check_writable(path, root)   # the folders just made are no links either
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as e:
        raise UnsafeWrite(f"{path} cannot be written: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else old if old is not None else 0o666 & ~umask())
        os.replace(tmp, real)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise UnsafeWrite(f"{path} cannot be written: {e.strerror or e}") from None
        raise
    return real


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None, encoding: str = "utf-8",
                      mode: int | None = None) -> Path:
    """`atomic_write_bytes` of `text` encoded (UTF-8 unless told)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode(encoding), root, mode)


def save_figure(figure, path: str | Path, root: str | Path | None = None, **savefig_kwargs) -> Path:
    """A matplotlib figure saved as `atomic_write_bytes` writes (the format from `path`'s suffix)."""
    import io
    buf = io.BytesIO()
    figure.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig_kwargs)
    return atomic_write_bytes(path, buf.getvalue(), root)
