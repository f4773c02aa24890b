"""How the course's tools write files: never through a symbolic link, never outside the folder they write in,
and atomically, so that no crash, full disk or refusal leaves a file half written.

`atomic_write_text(path, text, root)` (and `atomic_write_bytes`) refuse, with an `UnsafeWrite` naming the
file, a `path` that is not inside `root`, that goes through a symbolic link anywhere below `root` (the file
itself or a folder on the way), that is a directory, or that exists read-only (the learner's way of saying
"leave it"). Otherwise the data goes to a temporary file in the same folder, which then replaces `path` in one
`os.replace`: a reader sees the old file or the new one, never a mix, and a link planted at `path` after the
check is replaced, never followed. The folders on the way are opened one by one without following a link
(O_NOFOLLOW, then every step relative to the folder so opened: Linux and macOS, where triton runs), so a
folder swapped for a link after the check is refused too. Ctrl-C (SIGINT) and SIGTERM during a write are
held until the file is whole (or removed), then delivered: no interrupt or `kill` leaves a temporary file
behind. A new file gets the usual permissions (0666 less the umask), an existing one keeps its own.
`check_writable` runs the same checks without writing, so a tool can check every file it is about to write
before it writes any. A name the file system cannot hold (too long, a NUL byte), an existing target that is
not a regular file (a fifo, a socket, a device) and text that cannot be encoded are refused the same way,
before anything is written.

`read_regular(path)` reads a file the tools are given (an exercise, a solution, a chapter, a file handed out)
only when it is a regular file: a fifo or a device would block the tool or never end, so it is opened without
blocking and refused by its type, with an `UnreadableFile` naming it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import stat
import threading
from pathlib import Path


class UnsafeWrite(ValueError):
    """A file the tool will not write (one line naming it and saying why)."""


class UnreadableFile(ValueError):
    """A file the tool will not read (one line naming it and saying why)."""


# What a temporary file's name keeps of the target's: `.{name}.XXXXXXXX.tmp` stays within the 255 bytes a
# file name may have on common file systems even for a target whose own name is that long.
_TMP_NAME_KEEP = 200
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def resolved(path: str | Path) -> Path:
    """`Path(path).resolve()`, with a loop of symbolic links an OSError (ELOOP) like any other a path can
    raise (pathlib raises RuntimeError for it before Python 3.13)."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, "a loop of symbolic links", str(path)) from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a fifo"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _as_path(path, argument: str = "path") -> Path:
    """`path` as a Path; a TypeError naming `argument` for another type, an UnsafeWrite for a NUL byte."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a str or a path, got {type(path).__name__}")
    if "\0" in os.fspath(path):
        raise UnsafeWrite(f"{os.fspath(path)!r}: a file name cannot hold a NUL byte")
    return Path(path)


# Held during a write, and delivered after it in this order: the termination first, as an interrupt raised
# first would drop it.
_HELD_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C (SIGINT) and a termination request (SIGTERM: `kill`, a closing Jupyter kernel or CI job) held back
    until the block is done, then delivered to the handlers they would have met: a temporary file is never left
    behind by a signal that lands between its creation and its removal or rename. The previous handlers are
    back in place before delivery: a Python handler is called; SIGINT left at its default raises
    KeyboardInterrupt, SIGTERM left at its default is raised again and ends the process; an ignored one
    vanishes. Only the main thread receives signals; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught, previous = [], {}
    try:
        for signum in _HELD_SIGNALS:
            if signal.getsignal(signum) is not None:   # None: a handler set outside Python, left to itself
                previous[signum] = signal.signal(signum, lambda number, frame: caught.append(number))
    except (ValueError, OSError):   # signals cannot be handled here (an embedded interpreter)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in (s for s in _HELD_SIGNALS if s in caught):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def read_regular(path: str | Path, follow_links: bool = True) -> bytes:
    """The bytes of the regular file at `path`; an `UnreadableFile` naming it when it is missing, a directory,
    a fifo, a socket or a device (opened without blocking, so a fifo never hangs the tool), a symbolic link
    (unless `follow_links`), or cannot be read."""
    path = _as_path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        if not follow_links and path.is_symlink():
            raise UnreadableFile(f"{path} is a symbolic link (to {os.readlink(path)}): not read")
        fd = os.open(path, flags)
    except UnreadableFile:
        raise
    except OSError as e:
        raise UnreadableFile(f"{path} cannot be read: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path} is {_kind(mode)}, not a regular file: not read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = None
            return f.read()
    except OSError as e:
        raise UnreadableFile(f"{path} cannot be read: {e.strerror or e}") from None
    finally:
        if fd is not None:
            os.close(fd)


def umask() -> int:
    """The process's umask (os.umask can only set it: it is set and put back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _writable(path: Path) -> bool:
    """Writable by this process, and not marked read-only by its owner (which root would otherwise ignore)."""
    return bool(path.stat().st_mode & 0o222) and os.access(path, os.W_OK)


def _inside(path: Path, root: Path) -> Path:
    """`path` relative to `root`: the part of `path` below `root` as `root` is spelled (a `..` in `root` itself,
    a course folder given as /a/b/../course, is the caller's choice), else `path` against `root` both taken
    as given, then against `root` with its links resolved. A `..` below `root` is refused."""
    if not (path.is_absolute() and root.is_absolute()):
        path, root = Path.cwd() / path, Path.cwd() / root
    if path.parts[:len(root.parts)] == root.parts:
        below = path.parts[len(root.parts):]
        if ".." in below:   # `..` after a link goes up from the link's target: never guessed at
            raise UnsafeWrite(f"{path}: a path with '..' in it is not written")
        return Path(*below)
    if ".." in path.parts:
        raise UnsafeWrite(f"{path}: a path with '..' in it is not written")
    path = Path(os.path.abspath(path))
    for base in (Path(os.path.abspath(root)), resolved(root)):
        try:
            return path.relative_to(base)
        except ValueError:
            continue
    raise UnsafeWrite(f"{path} is outside {root}: not written")


def check_writable(path: str | Path, root: str | Path) -> Path:
    """The real location `path` would be written at (inside `root`, with `root`'s own links resolved), or an
    `UnsafeWrite` saying why it is not written. Nothing is written."""
    try:
        return _check_writable(_as_path(path), _as_path(root, "root"))
    except OSError as e:   # a name too long, a loop of links, a folder that cannot be searched
        raise UnsafeWrite(f"{path} cannot be written: {e.strerror or e}") from None


def _check_writable(path: Path, root: Path) -> Path:
    rel = _inside(path, root)
    if not rel.parts:
        raise UnsafeWrite(f"{path} is the folder {root} itself, not a file in it")
    real = resolved(root)
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
    if real.exists() and not real.is_file():   # replacing a fifo, socket or device is never what was meant
        raise UnsafeWrite(f"{path} is {_kind(real.stat().st_mode)}, not a regular file: not written")
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
    if mode is not None and (isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777):
        raise ValueError(f"mode must be permission bits from 0 to 0o777, got {mode!r}")
    path = _as_path(path)
    if root is None:   # the folder as named (links and '..' in it are the caller's choice), the file no link
        try:
            root = resolved(Path(path).parent)
        except OSError as e:
            raise UnsafeWrite(f"{path} cannot be written: {e.strerror or e}") from None
        path = root / Path(path).name
    real = check_writable(path, root)
    with _signals_held():
        return _write(path, real, root, bytes(data), mode)


def _write(path: Path, real: Path, root, data: bytes, mode: int | None) -> Path:
    """The write itself, relative to folder descriptors: every folder below `root` is opened without following
    a link (and made when missing), and the temporary file is made, renamed or removed in the folder so
    opened. A folder swapped for a link after `check_writable` looked (a race, or another program at work) is
    refused, never followed."""
    base = resolved(root)
    rel = real.relative_to(base)
    try:
        folder = _open_folders(base, rel.parts[:-1], path)
    except OSError as e:
        raise UnsafeWrite(f"{path} cannot be written: {e.strerror or e}") from None
    name, tmp = rel.parts[-1], None
    try:
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            old = st.st_mode & 0o7777 if stat.S_ISREG(st.st_mode) else None
        except FileNotFoundError:
            old = None
        for _ in range(100):
            tmp = f".{name[:_TMP_NAME_KEEP]}.{secrets.token_hex(4)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600,
                             dir_fd=folder)
                break
            except FileExistsError:
                tmp = None
        if tmp is None:
            raise FileExistsError(errno.EEXIST, "no free temporary file name")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode if mode is not None else old if old is not None else 0o666 & ~umask())
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=folder)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise UnsafeWrite(f"{path} cannot be written: {e.strerror or e}") from None
        raise
    finally:
        os.close(folder)
    return real


def _open_folders(base: Path, parts: tuple[str, ...], path: Path) -> int:
    """A descriptor of `base`/`parts`: each folder below `base` made when missing and opened with O_NOFOLLOW,
    so a link there is refused (`UnsafeWrite`), never followed."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise UnsafeWrite(f"{base / Path(*parts[:i + 1])} became a symbolic link or a file while {path} "
                                  "was being written: not written through") from None
            os.close(fd)
            fd = below
        return fd
    except BaseException:
        os.close(fd)
        raise


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None, encoding: str = "utf-8",
                      mode: int | None = None) -> Path:
    """`atomic_write_bytes` of `text` encoded (UTF-8 unless told)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    try:
        data = text.encode(encoding)
    except LookupError:
        raise ValueError(f"encoding {encoding!r} is not a known text encoding") from None
    except UnicodeEncodeError as e:
        raise UnsafeWrite(f"{path}: its text cannot be written as {encoding} ({e.reason} at character "
                          f"{e.start}): not written") from None
    return atomic_write_bytes(path, data, root, mode)


def save_figure(figure, path: str | Path, root: str | Path | None = None, **savefig_kwargs) -> Path:
    """A matplotlib figure saved as `atomic_write_bytes` writes (the format from `path`'s suffix)."""
    import io
    buf = io.BytesIO()
    figure.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", **savefig_kwargs)
    return atomic_write_bytes(path, buf.getvalue(), root)


def results_folder(path: str | Path, make: bool = True) -> Path:
    """The folder a benchmark writes its results into, made with its parents where missing (`make`), or an
    `UnsafeWrite` naming what is in the way: a file, a link to nothing or a loop, a folder that cannot be
    made. With make=False only checked, so a refusal comes before any work."""
    if isinstance(path, (str, os.PathLike)) and not os.fspath(path):   # Path("") is ".": the results would
        raise UnsafeWrite("an empty path names no folder: give one, e.g. results")   # land wherever it started
    path = _as_path(path, "out")
    try:
        for folder in (path, *path.parents):
            if folder.is_symlink() and not folder.exists():
                raise UnsafeWrite(f"{folder} is a symbolic link to nothing: results need a folder")
            if folder.exists():
                if not folder.is_dir():
                    raise UnsafeWrite(f"{folder} is not a directory: results are written into a folder")
                break
        if make:
            path.mkdir(parents=True, exist_ok=True)
    except OSError as e:   # a loop of links, a read-only parent, a name too long
        raise UnsafeWrite(f"{path}: the results folder cannot be made: {e.strerror or e}") from None
    return path


def check_out_folder(path: str | Path, option: str = "--out") -> None:
    """A command's results folder checked before its work (`results_folder` with make=False): an `UnsafeWrite`
    naming the option, e.g. "--out: results is not a directory: ...", which the command prints as its error."""
    try:
        results_folder(path, make=False)
    except UnsafeWrite as e:
        raise UnsafeWrite(f"{option}: {e}") from None
