"""A trace file's JSON text, read as untrusted input.

Only regular files are opened (a FIFO would block the open, `/dev/zero` never ends). Plain or
gzipped JSON is told by its magic bytes, not by its name. The text is read, or inflated, one MiB at
a time, and each MiB is checked before the next is read, so that a small file that inflates to
gigabytes fails early with little memory:

- the first byte that is not whitespace must be `{` or `[`;
- control bytes other than tab, LF and CR (NUL first of all) cannot appear in JSON text at all;
- whitespace is legal JSON and is not stripped, but a stretch of 16 MiB without a `"` or a `,`
  (gigabytes of padding, or one string or number that long) is no trace: every event has both;
- the text, plus what decoding it can cost (one `msgspec.Raw` of 64 bytes per `,` at most), must fit
  in the memory this process may still use (available memory, and `RLIMIT_AS` when set).

A Perfetto protobuf trace (`is_protobuf`: its first byte is a `Trace.packet` tag, 0x0a, and its
first MiB holds bytes JSON text cannot) is read the same way, each MiB checked only against the
memory its decoding needs (`_BYTES_PER_PROTOBUF_BYTE` per byte); `perfetto` reads it.

So no input needs memory far beyond what its content holds: a valid trace of N bytes of JSON loads
in 1.5 to 1.95 N (the text itself, kept for `args`, is N; the forked child's memory included);
anything else is refused once it has read what shows it is no trace.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

try:  # ISA-L inflates ~1.5x faster than zlib; the stdlib stays the fallback.
    from isal.igzip import IGzipFile as _GzipFile
except ImportError:  # pragma: no cover - isal is a declared dependency
    _GzipFile = gzip.GzipFile  # type: ignore[misc,assignment]

from branchscope.profiling.files import kind_of
from branchscope.profiling.trace.model import LoadCancelled, TraceFormatError


class _Readable(Protocol):
    """A binary file as the reader uses it (a plain file, or a gzip stream over one)."""

    def read(self, size: int = -1, /) -> bytes: ...


_GZIP_MAGIC = b"\x1f\x8b"
#: Bytes read or inflated at a time; each piece is checked before the next is read.
_READ_CHUNK = 1 << 20
#: The longest stretch a trace may hold without a `"` or a `,` (see the module docstring).
_MAX_BARE_RUN = 16 << 20
#: What decoding may cost per `,` beyond the text: a msgspec.Raw and its list slot (measured: 64.5).
_BYTES_PER_COMMA = 64
#: What decoding a Perfetto trace may cost per byte of it, the bytes themselves included (see
#: `perfetto`; measured: 2.0 to 4.1 on the load benchmark's traces exported to .pftrace).
_BYTES_PER_PROTOBUF_BYTE = 4
#: The tag of a Perfetto `Trace`'s only field, `packet` (1, length-delimited): its first byte.
_PACKET_TAG = 0x0A
#: Below this much, memory is not even looked at.
_UNCHECKED_NEED = 64 << 20


def check_trace_path(path: str | os.PathLike[str]) -> os.stat_result:
    """Refuse, without opening it, what cannot be a trace file: a missing path, a folder, or
    anything but a regular file (opening a FIFO blocks; a device such as /dev/zero never ends)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise TraceFormatError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:
        raise TraceFormatError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    _check_mode(p, st.st_mode)
    return st


def _check_mode(p: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise TraceFormatError(f"{p}: is a folder, not a trace file")
    if not stat.S_ISREG(mode):
        raise TraceFormatError(f"{p}: is {kind_of(mode)}, not a regular file: not a trace file")


def _read_bytes(p: Path, report: Callable[[str, float], None]) -> bytes:
    """The text of the trace file at `p` (inflated when gzipped), checked as the module docstring
    says; `report("reading", fraction)` before each MiB."""
    size = check_trace_path(p).st_size
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        # O_NONBLOCK: should the path have become a FIFO since the check, the open does not block.
        fd = os.open(p, flags)
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read: {exc.strerror or exc}") from None
    gzipped = False
    with open(fd, "rb", buffering=0) as f:
        try:
            _check_mode(p, os.fstat(fd).st_mode)
            gzipped = f.read(2) == _GZIP_MAGIC
            f.seek(0)
            def read_so_far() -> None:
                report("reading", f.tell() / size if size else 1.0)

            if not gzipped:
                data = _read_text(p, f, "", read_so_far)
            else:
                with _GzipFile(fileobj=f, mode="rb") as gz:
                    data = _read_text(p, gz, "inflates to ", read_so_far)
        except (TraceFormatError, LoadCancelled):
            raise
        except MemoryError:
            raise TraceFormatError(f"{p}: not enough memory to read it") from None
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            if not gzipped:
                raise TraceFormatError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
            raise TraceFormatError(f"{p}: broken gzip data ({exc or 'truncated'})") from None
        except Exception as exc:  # isal's own error type
            if not gzipped:
                raise
            raise TraceFormatError(f"{p}: broken gzip data ({exc or 'truncated'})") from None
    if _first_byte(data) == b"":
        raise TraceFormatError(f"{p}: empty file")
    return data


def _read_text(p: Path, src: _Readable, inflates: str, read_so_far: Callable[[], None]) -> bytes:
    """All of `src`, read a chunk at a time; each chunk is checked (module docstring) before the
    next is read, so that no input takes more memory than the text it holds."""
    out = io.BytesIO()  # grows in place; getvalue() hands over its buffer without a copy
    scratch = np.empty(_READ_CHUNK, dtype=np.uint8)
    total = bare = commas = 0
    started = False
    budget: int | None = None
    while True:
        read_so_far()
        chunk = src.read(_READ_CHUNK)
        if not chunk:
            break
        if not total and is_protobuf(chunk):
            out.write(chunk)
            return _read_protobuf(p, src, out, len(chunk), inflates, read_so_far)
        n = len(chunk)
        a = np.frombuffer(chunk, dtype=np.uint8)
        bad = _bad_byte(a, scratch[:n] if n <= scratch.size else np.empty(n, np.uint8))
        if bad >= 0:
            raise TraceFormatError(
                f"{p}: not valid JSON: control byte 0x{chunk[bad]:02x} at byte {total + bad}, "
                "which JSON text cannot hold"
            )
        if not started:
            m = _NON_SPACE.search(chunk)
            if m:
                c = chunk[m.start()]
                if c not in b"{[":
                    raise TraceFormatError(
                        f"{p}: not valid JSON: it begins with {bytes([c])!r}, where a trace begins with '{{' or '['"
                    )
                started = True
        # Stretches without a '"' or a ',': find/rfind stop at the first hit, near the ends.
        first = min((k for k in (chunk.find(b'"'), chunk.find(b",")) if k >= 0), default=-1)
        bare += n if first < 0 else first
        if bare > _MAX_BARE_RUN:
            raise TraceFormatError(
                f"{p}: not a trace: {_MAX_BARE_RUN >> 20} MiB without a '\"' or a ',' before byte "
                f"{total + (n if first < 0 else first)} (whitespace padding, or one string or number "
                "that long)"
            )
        if first >= 0:
            bare = n - 1 - max(chunk.rfind(b'"'), chunk.rfind(b","))
        commas += chunk.count(b",")  # C, no temporary array
        out.write(chunk)
        total += n
        del a, chunk
        # What decoding needs: the text, and a msgspec.Raw per ',' at most.
        need = total + _BYTES_PER_COMMA * commas
        budget = _within_budget(p, need, budget, f"{inflates or 'holds '}more than {_mib(total)} of JSON text")
    return out.getvalue()


def _within_budget(p: Path, need: int, budget: int | None, holds: str) -> int | None:
    """The memory this process may still use (`budget`, looked up once `need`, what decoding the
    text read so far needs, passes what is never checked); TraceFormatError, saying what the file
    `holds`, when `need` is more."""
    if need <= (_UNCHECKED_NEED if budget is None else budget):
        return budget
    if budget is None:
        budget = _memory_budget()
    if need > budget:
        raise TraceFormatError(
            f"{p}: too large to load: it {holds}, which needs about {_mib(need)} of memory to decode, "
            f"more than the {_mib(budget)} this process may still use"
        )
    return budget


def is_protobuf(data: bytes) -> bool:
    """Whether `data` (a file's text, or its first MiB) is a Perfetto protobuf trace rather than JSON
    (module docstring): told by content, whatever the file's name."""
    if not data or data[0] != _PACKET_TAG:
        return False
    head = np.frombuffer(data, dtype=np.uint8, count=min(len(data), _READ_CHUNK))
    return _bad_byte(head, np.empty(head.size, np.uint8)) >= 0


def _read_protobuf(p: Path, src: _Readable, out: io.BytesIO, total: int, inflates: str, read_so_far: Callable[[], None]) -> bytes:
    """The rest of a Perfetto trace after its first chunk (in `out`), a chunk at a time, each
    checked against the memory its decoding needs."""
    budget: int | None = None
    while True:
        need = _BYTES_PER_PROTOBUF_BYTE * total
        budget = _within_budget(p, need, budget, f"{inflates or 'holds '}more than {_mib(total)} of Perfetto protobuf")
        read_so_far()
        chunk = src.read(_READ_CHUNK)
        if not chunk:
            return out.getvalue()
        out.write(chunk)
        total += len(chunk)


def _bad_byte(a: np.ndarray, tmp: np.ndarray) -> int:
    """Index of the first byte in `a` that JSON text cannot hold (a control byte other than tab,
    LF, CR; NUL first of all), or -1.

    Two minimums settle it for nearly every chunk, without locating anything: below 9 is bad, and
    with `a - 11` wrapping around, 11 and 12 land on 0 and 1, CR (13) on 2, 14..31 on 3..20, and
    tab, LF and every other byte above 20.
    """
    low = int(a.min())
    if low >= 0x20:
        return -1
    if low >= 0x09:
        np.subtract(a, 11, out=tmp)
        shifted = int(tmp.min())
        if shifted > 20 or (shifted == 2 and not np.any((a > 13) & (a < 0x20))):
            return -1  # only tab, LF (and CR)
    bad = (a < 0x20) & (a != 0x09) & (a != 0x0A) & (a != 0x0D)
    return int(np.argmax(bad))


def _memory_budget() -> int:
    """Bytes this process may still allocate: available memory, and the room left under
    RLIMIT_AS when an address-space limit is set."""
    budget = _available_memory()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            budget = min(budget, soft - _address_space_used())
    except (ImportError, OSError, ValueError):  # pragma: no cover - non-POSIX
        pass
    return max(budget, 0)


def _available_memory() -> int:
    try:  # Linux, without importing psutil (which costs more than reading the file)
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def _address_space_used() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import psutil

        return int(psutil.Process().memory_info().vms)


def _mib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


_NON_SPACE = re.compile(rb"\S")


def _first_byte(data: bytes) -> bytes:
    """The first non-whitespace byte, without copying a large buffer as `strip()` would."""
    m = _NON_SPACE.search(data)
    return data[m.start() : m.start() + 1] if m else b""

