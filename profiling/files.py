"""Reading the small files a user or a folder hands us (run.json, sweep.json, a dropped file's
magic bytes) without trusting what the path turns out to be. No torch, no Qt.

A path may name a FIFO (opening it for reading blocks until a writer comes: for ever), a device
(/dev/zero never ends), a folder, or a regular file far larger than the format ever is. So a file is
opened non-blocking, checked with `fstat` on the descriptor that was opened (no race between a
check and the open), and read with a size bound; anything else raises `UnreadableFile`, an
`OSError` whose message is one line.

The trace reader and the snapshot loader open their (large) inputs the same way, with their own
bounds tied to what the input holds (`branchscope.profiling.trace.reader`, `.snapshot`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

#: run.json and sweep.json are a few hundred KB at most (a run's step times, its branches).
JSON_LIMIT = 64 << 20
#: How deeply such a file may nest: branchscope's own nest a few levels.
JSON_DEPTH = 64


class UnreadableFile(OSError):
    """Not a regular file, too large, or the open failed; str() is one line."""


#: What a file is, by the `stat` test its st_mode passes, in words.
_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """'a FIFO (named pipe)', 'a folder', … for a file's st_mode."""
    return next((words for test, words in _KINDS if test(mode)), "a special file")


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> int:
    """A read-only descriptor on `path`, which must be a regular file (never blocks on a FIFO).

    `follow_symlinks=False`: a symbolic link is refused too (what branchscope wrote is never a link).
    Raises UnreadableFile. The caller closes the descriptor.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and os.path.islink(path):
            raise UnreadableFile(f"{path}: is a symbolic link, not a file branchscope wrote") from None
        raise UnreadableFile(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path}: is {kind_of(mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file `path`, refused (UnreadableFile) past `limit` bytes: checked
    against its size before reading, and by reading at most `limit + 1` bytes (a file that grows)."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    with open(fd, "rb", buffering=0) as f:
        if os.fstat(fd).st_size > limit:
            raise UnreadableFile(f"{path}: larger than {limit} bytes")
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    if len(data) > limit:
        raise UnreadableFile(f"{path}: larger than {limit} bytes")
    return data


def read_head(path: str | os.PathLike[str], n: int) -> bytes:
    """The first `n` bytes of a regular file (b"" for anything else or on any error)."""
    try:
        fd = open_regular(path)
    except OSError:
        return b""
    with open(fd, "rb", buffering=0) as f:
        try:
            return f.read(n)
        except OSError:
            return b""


def read_json_object(path: str | os.PathLike[str], *, limit: int = JSON_LIMIT, follow_symlinks: bool = True) -> dict[str, Any]:
    """A JSON object from a regular file of at most `limit` bytes.

    Raises UnreadableFile (an OSError) for what cannot be read, ValueError for what is not a JSON
    object; each message is one line.
    """
    data = read_regular(path, limit, follow_symlinks=follow_symlinks)
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ValueError(f"{Path(path)}: is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError(f"{Path(path)}: is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{Path(path)}: is not a JSON object")
    if nested_deeper_than(obj, JSON_DEPTH):
        raise ValueError(f"{Path(path)}: nests deeper than {JSON_DEPTH} levels")
    return obj


def nested_deeper_than(obj: Any, limit: int) -> bool:
    """Whether decoded JSON holds lists or objects more than `limit` levels deep (walked without
    recursion, containers only)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False
