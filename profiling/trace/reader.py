"""Read a torch.profiler / Chrome trace file into a `Trace`.

Speed is the point of this module: users open traces of hundreds of MB to 1 GB. msgspec splits
the file into one `msgspec.Raw` slice per event (a fast scan), then decodes them 4096 at a time
into small typed structs (far cheaper than dicts), whose fields become numpy columns through
`map`/`attrgetter` and numpy, never a Python loop over events; decimal timestamps are read from
their digits by numpy (`_decimal_ns`), exact to the ns. From `PARALLEL_MIN_EVENTS` events on, a
forked child decodes the second half on another core (`forked`; its columns come back through a
pipe) while this process decodes the first. Complete events' `args` are not decoded: each keeps
its whole text, read on demand (hover, details); the few kinds needed at load time (memory,
counters, metadata) are decoded then. `load_trace` reports its progress and can be cancelled
(`progress`).

Formats handled, all seen in real traces: plain or gzipped JSON (detected by magic bytes, not by
name), an object with `traceEvents` or a bare event array, timestamps as ints, floats with ns
decimals (kept exact by reading the number's text), or strings, relative to `baseTimeNanoseconds`
or absolute, negative (wrapped 32-bit) tids, pseudo processes with string pids ("Spans",
"Traces"), and the legacy format of PyTorch <= 1.9 ("stream 7" tids, `Kernel`/`Memcpy` categories,
`[memory]` events without `Total Allocated`).

Files are untrusted. Only regular files are opened (a FIFO would block the open, `/dev/zero` never
ends). The text is read, or inflated, one MiB at a time, and each MiB is checked before the next is
read, so that a small file that inflates to gigabytes fails early with little memory:

- the first byte that is not whitespace must be `{` or `[`;
- control bytes other than tab, LF and CR (NUL first of all) cannot appear in JSON text at all;
- whitespace is legal JSON and is not stripped, but a stretch of 16 MiB without a `"` or a `,`
  (gigabytes of padding, or one string or number that long) is no trace: every event has both;
- the text, plus what decoding it can cost (one `msgspec.Raw` of 64 bytes per `,` at most), must fit
  in the memory this process may still use (available memory, and `RLIMIT_AS` when set).

So no input needs memory far beyond what its content holds: a valid trace of N bytes of JSON loads
in 1.5 to 1.95 N (the text itself, kept for `args`, is N; the forked child's memory included); anything else is refused once it has read what shows it is no trace.
"""

from __future__ import annotations

import gc
import gzip
import io
import itertools
import os
import re
import stat
import sys
import time
import zlib
from collections.abc import Callable
from operator import attrgetter, is_not
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec
import numpy as np

try:  # ISA-L inflates ~1.5x faster than zlib; the stdlib stays the fallback.
    from isal.igzip import IGzipFile as _GzipFile
except ImportError:  # pragma: no cover - isal is a declared dependency
    _GzipFile = gzip.GzipFile  # type: ignore[misc,assignment]

from branchscope.profiling.files import kind_of
from branchscope.profiling.trace import forked
from branchscope.profiling.trace.flows import bind_flows
from branchscope.profiling.trace.model import (
    ROLE_ORDER,
    CounterTrack,
    LaneRole,
    LaneTable,
    LoadCancelled,
    MemorySeries,
    Trace,
    TraceFormatError,
    _int_column,
    build_trace,
)
from branchscope.profiling.trace.run_info import RunInfo


class _Readable(Protocol):
    """A binary file as the reader uses it (a plain file, or a gzip stream over one)."""

    def read(self, size: int = -1, /) -> bytes: ...

#: Categories whose events run on a GPU stream (current names and the legacy ones).
GPU_CATEGORIES = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
        "cuda_sync",
        "Kernel",
        "Memcpy",
        "Memset",
        "gpu_op",
    }
)

_GZIP_MAGIC = b"\x1f\x8b"
#: Bytes read or inflated at a time; each piece is checked before the next is read.
_READ_CHUNK = 1 << 20
#: The longest stretch a trace may hold without a `"` or a `,` (see the module docstring).
_MAX_BARE_RUN = 16 << 20
#: What decoding may cost per `,` beyond the text: a msgspec.Raw and its list slot (measured: 64.5).
_BYTES_PER_COMMA = 64
#: Below this much, memory is not even looked at.
_UNCHECKED_NEED = 64 << 20
_STREAM_TID = re.compile(r"^stream\s+(-?\d+)")
_GPU_LABEL = re.compile(r"GPU\s+(\d+)")
#: Keep timestamps far from int64 overflow even after adding durations (about +-73 years in ns).
_MAX_ABS_NS = 1 << 61


class _Event(msgspec.Struct, gc=False):
    """What the load reads of every event. `args` are read from the event's own text when needed
    (`_WithArgs`, `Trace.event_args`), never at load for complete events."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: Any = None
    dur: Any = None


class _WithArgs(_Event, gc=False):
    args: msgspec.Raw = msgspec.Raw()  # empty when absent


class _FlowEvent(_Event, gc=False):
    """A flow endpoint: decoded only when the trace's flows are first used."""

    id: Any = None
    bp: Any = None


class _TraceFile(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None
    record_shapes: Any = None
    profile_memory: Any = None
    branchscope: Any = None


class _MemoryArgs(msgspec.Struct, gc=False):
    device_type: int = msgspec.field(name="Device Type", default=0)
    device_id: int = msgspec.field(name="Device Id", default=-1)
    bytes: int = msgspec.field(name="Bytes", default=0)
    total: int | None = msgspec.field(name="Total Allocated", default=None)
    reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    addr: int | None = msgspec.field(name="Addr", default=None)


class _MemoryEvent(msgspec.Struct, gc=False):
    ts: Any = None
    pid: int | str = 0
    tid: int | str = 0
    args: _MemoryArgs = msgspec.field(default_factory=_MemoryArgs)


#: float_hook=str keeps a float's digits so that ns decimals of µs timestamps survive: a float64 µs
#: timestamp near 1.7e15 resolves only 0.25 µs; the text resolves 1 ns.
_FILE_DECODER = msgspec.json.Decoder(_TraceFile, float_hook=str)
_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENT_DECODER = msgspec.json.Decoder(_Event, float_hook=str)
_WITH_ARGS_DECODER = msgspec.json.Decoder(_WithArgs, float_hook=str)
_MEMORY_EVENT_DECODER = msgspec.json.Decoder(_MemoryEvent, float_hook=str)
_FLOW_DECODER = msgspec.json.Decoder(_FlowEvent, float_hook=str)
#: Events decoded into structs at a time. The file is first split into one Raw slice per event
#: (a fast scan), then decoded chunk by chunk, so only one chunk of structs is alive at once:
#: this keeps peak memory near 1.5x the JSON instead of 3.5x. A chunk small enough to stay in
#: the CPU's cache while its columns are taken is 1.7x faster than one of 32768 events.
_CHUNK = 4096
_ANY_DECODER = msgspec.json.Decoder()


#: `progress(phase, fraction)`: phase "reading", "parsing", "events", "lanes" or "memory", fraction
#: 0..1 within it; return False to stop the load (`LoadCancelled`).
ProgressCallback = Callable[[str, float], bool]


class _Progress:
    """Calls a `ProgressCallback` when a phase starts, and then once its fraction has grown by 1% or
    50 ms have passed; raises `LoadCancelled` when the callback returns False. No callback: no-op."""

    __slots__ = ("_fn", "_phase", "_fraction", "_time")

    def __init__(self, fn: ProgressCallback | None) -> None:
        self._fn = fn
        self._phase = ""
        self._fraction = 0.0
        self._time = 0.0

    def __call__(self, phase: str, fraction: float) -> None:
        fn = self._fn
        if fn is None:
            return
        now = time.monotonic()
        if phase == self._phase and fraction < self._fraction + 0.01 and now < self._time + 0.05:
            return
        self._phase, self._fraction, self._time = phase, fraction, now
        go_on = fn(phase, min(max(fraction, 0.0), 1.0))
        if go_on is not None and not go_on:
            raise LoadCancelled(f"loading stopped while {phase}")


def load_trace(path: str | os.PathLike[str], *, progress: ProgressCallback | None = None) -> Trace:
    """Load a trace file. Raises `TraceFormatError` (a ValueError) naming the file and the problem.

    `progress(phase, fraction)` is called now and then (see `ProgressCallback`); when it returns
    False the load stops with `LoadCancelled`, keeping nothing.
    """
    p = Path(path)
    report = _Progress(progress)
    data = _read_bytes(p, report)
    # Hundreds of thousands of new objects would trigger many useless cyclic-GC passes.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(str(p), data, report)
    except TraceFormatError:
        raise
    except RecursionError:
        raise TraceFormatError(f"{p}: nesting too deep to be a trace") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
    except (ValueError, TypeError, OverflowError, KeyError, IndexError) as exc:
        raise TraceFormatError(f"{p}: malformed events: {exc}") from None
    finally:
        if gc_was_enabled:
            gc.enable()


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


def _read_bytes(p: Path, report: _Progress) -> bytes:
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
        if need > (_UNCHECKED_NEED if budget is None else budget):
            if budget is None:
                budget = _memory_budget()
            if need > budget:
                raise TraceFormatError(
                    f"{p}: too large to load: it {inflates or 'holds '}more than {_mib(total)} of JSON text, "
                    f"which needs about {_mib(need)} of memory to decode, more than the {_mib(budget)} "
                    "this process may still use"
                )
    return out.getvalue()


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


def _parse(path: str, data: bytes, report: _Progress) -> Trace:
    metadata: dict[str, Any] = {}
    report("parsing", 0.0)
    try:
        if _first_byte(data) == b"[":
            events = _LIST_DECODER.decode(data)  # the bare-array form of the Chrome format
        else:
            try:
                top = _FILE_DECODER.decode(data)
            except msgspec.DecodeError:
                repaired = _without_raw_trace_name(data)
                if repaired is None:
                    raise
                data, metadata["traceName"] = repaired
                top = _FILE_DECODER.decode(data)
            if top.traceEvents is None:
                raise TraceFormatError(f"{path}: JSON has no 'traceEvents' list: not a profiler trace")
            events = top.traceEvents
            for key in _TraceFile.__struct_fields__:
                value = getattr(top, key)
                if key != "traceEvents" and value is not None:
                    metadata[key] = value
        report("parsing", 1.0)
        return _build(path, events, metadata, report)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(f"{path}: unexpected trace structure: {exc}") from None
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"{path}: not valid JSON: {exc}") from None


#: Where kineto's last key, "traceName", is looked for: the end of the text.
_TRACE_NAME_TAIL = 1 << 16
_TRACE_NAME_VALUE = re.compile(rb'\s*:\s*"')


def _without_raw_trace_name(data: bytes) -> tuple[bytes, str] | None:
    """kineto writes the path it exports to into the trace's last key, "traceName", unescaped: a
    trace saved under a name holding `"` or `\\` is not JSON. Such a text without that key, and the
    name as written; None when the text does not end that way (the error stands)."""
    tail_start = max(0, len(data) - _TRACE_NAME_TAIL)
    tail = data[tail_start:]
    key = tail.rfind(b'"traceName"')
    if key < 0 or not tail[:key].rstrip().endswith(b","):
        return None
    m = _TRACE_NAME_VALUE.match(tail, key + len(b'"traceName"'))
    rest = tail[m.end() :].rstrip() if m else b""
    if not (rest.endswith(b"}") and rest[:-1].rstrip().endswith(b'"')):
        return None
    name = rest[:-1].rstrip()[:-1]
    comma = tail_start + tail[:key].rstrip().rfind(b",")
    return data[:comma] + b"}", name.decode("utf-8", errors="replace")


# ---- timestamps ------------------------------------------------------------------------------


def _text_to_ns(v: str) -> int:
    """'1712195495519695.8' (µs) -> exact ns; falls back to float for exponents and the like."""
    s = v.strip()
    neg = s.startswith("-")
    a, dot, b = s.lstrip("+-").partition(".")
    if (not a or a.isdigit()) and (not b or b.isdigit()) and (a or b):
        frac = b[:3].ljust(3, "0")
        ns = int(a or "0") * 1000 + int(frac)
        if len(b) > 3 and b[3] >= "5":
            ns += 1
        return -ns if neg else ns
    f = float(s)  # ValueError for garbage; inf/nan rejected below
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError(f"timestamp {v!r} is not finite")
    return round(f * 1000)


def _to_ns(v: Any) -> int:
    t = type(v)
    if t is int:
        return v * 1000
    if t is str:
        return _text_to_ns(v)
    if t is float:
        return _text_to_ns(repr(v))
    raise ValueError(f"timestamp must be a number or a numeric string, got {type(v).__name__}")


def _ns_column(values: list[Any], what: str) -> np.ndarray:
    """Timestamps or durations in µs (ints, decimal texts, numeric strings) as exact int64 ns."""
    try:
        # Integer µs (most traces). numpy rejects decimal text, which takes the next path.
        col = np.array(values, dtype=np.int64)
        if col.ndim != 1:  # nested lists of equal length make a matrix: let the slow path name it
            raise TypeError
    except (ValueError, TypeError, OverflowError):
        out = _decimal_ns(values)
        if out is None:  # anything the vectorised path does not take: one value at a time
            exact = [_to_ns(v) for v in values]
            if exact and (max(exact) >= _MAX_ABS_NS or min(exact) <= -_MAX_ABS_NS):
                raise ValueError(f"{what} out of range") from None
            return np.array(exact, dtype=np.int64)
        if out.size and (int(out.max()) >= _MAX_ABS_NS or int(out.min()) <= -_MAX_ABS_NS):
            raise ValueError(f"{what} out of range") from None
        return out
    if col.size and (int(col.max()) >= _MAX_ABS_NS // 1000 or int(col.min()) <= -_MAX_ABS_NS // 1000):
        raise ValueError(f"{what} out of range")
    return col * 1000


#: Width of the byte rows `_decimal_ns` parses; a value must leave the last 3 bytes free.
_DEC_WIDTH = 24
_ASCII_ZEROS = np.uint64(0x3030303030303030)
_LITTLE_ENDIAN = sys.byteorder == "little"


def _digits_value(block: np.ndarray) -> np.ndarray:
    """Rows of 24 ASCII digits (at most 19 significant) as uint64, 8 digits per 64-bit word at a
    time, SWAR-style: pairs, then quads, then octets (words are read little-endian)."""
    x = block.view(np.uint64) - _ASCII_ZEROS  # a word's first digit is its low byte
    x = (x * np.uint64(10) + (x >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    x = (x * np.uint64(100) + (x >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    x = (x * np.uint64(10000) + (x >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    # The first word holds at most 3 significant digits, so the sum fits in uint64.
    return x[:, 0] * np.uint64(10**16) + x[:, 1] * np.uint64(10**8) + x[:, 2]


def _decimal_ns(values: list[Any]) -> np.ndarray | None:
    """µs as decimal text (or ints) -> ns, exactly as `_text_to_ns` would, with no Python call per
    value; None when any value is not plain `[-]digits[.digits]` with at most 16 integer digits
    (the caller then converts one value at a time, which also names what is wrong).

    Each value becomes a byte row; rows are grouped by where their dot is, and each group's digits
    are copied right-aligned, as integer digits then exactly 3 decimals (zero-padded), into rows
    of ASCII zeros, read by `_digits_value`; a 4th decimal of 5 or more rounds up.
    """
    n = len(values)
    w = _DEC_WIDTH
    if not _LITTLE_ENDIAN:  # pragma: no cover - the words below are read little-endian
        return None
    try:
        text = np.array(values, dtype=f"S{w}")
    except (ValueError, TypeError, OverflowError, UnicodeError):
        return None
    if text.ndim != 1 or text.size != n:
        return None
    m = text.view(np.uint8).reshape(n, w)
    if n == 0 or m[:, w - 3].any():  # too long (or cut short by the width)
        return None
    rows = np.arange(n)
    length = (m == 0).argmax(axis=1)
    if int(np.count_nonzero(m)) != int(length.sum()):  # a NUL inside a value
        return None
    is_dot = m == 46
    dot = is_dot.argmax(axis=1)
    has_dot = is_dot[rows, dot]
    if int(np.count_nonzero(is_dot)) != int(np.count_nonzero(has_dot)):  # two dots in a value
        return None
    dot = np.where(has_dot, dot, length)
    neg = m[:, 0] == 45
    plain = ((m - np.uint8(48)) < 10) | is_dot | (m == 0)
    plain[:, 0] |= neg
    int_digits = dot - neg
    decimals = np.where(has_dot, length - dot - 1, 0)
    if not plain.all() or int_digits.max() > 16 or np.any(int_digits + decimals < 1):
        return None
    # Per group of rows with the dot at one place: "integer digits + 3 decimals" right-aligned in
    # rows of '0' (whole columns when every row is alike, the common case), read as one integer.
    kept = np.minimum(decimals, 3)
    group = (dot * 2 + neg) * 4 + kept
    groups = np.flatnonzero(np.bincount(group)).tolist()
    ns = np.empty(n, dtype=np.uint64)
    for g in groups:
        d, sign, k = g // 8, (g // 4) % 2, g % 4
        sel = np.flatnonzero(group == g) if len(groups) > 1 else None
        src = m if sel is None else m[sel]
        block = np.full((len(src), w), 48, dtype=np.uint8)
        block[:, w - 3 - (d - sign) : w - 3] = src[:, sign:d]
        block[:, w - 3 : w - 3 + k] = src[:, d + 1 : d + 1 + k]
        if sel is None:
            ns = _digits_value(block)
        else:
            ns[sel] = _digits_value(block)
    too_big = ns >= np.uint64(_MAX_ABS_NS)
    ns[too_big] = np.uint64(_MAX_ABS_NS)  # still out of range once signed; the caller says so
    fourth = np.minimum(dot + 4, w - 1)
    up = (decimals >= 4) & (m[rows, fourth] >= 53)
    out = ns.astype(np.int64) + up
    return np.where(neg, -out, out)


# ---- lanes -----------------------------------------------------------------------------------


def _real_id(v: int | str) -> int | None:
    """A pid/tid as int, or None for pseudo processes ("Spans", "Traces", "")."""
    if type(v) is int:
        return v
    s = str(v).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    return None


def _lane_tid(v: int | str, synthetic: dict[str, int]) -> int:
    if type(v) is int:
        return v
    s = str(v).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    m = _STREAM_TID.match(s)
    if m:
        return int(m.group(1))
    # Any other named thread keeps a stable id of its own, below every real tid.
    return synthetic.setdefault(s, -(1 << 40) - len(synthetic))


def _role(pid: int, tid: int, names: list[str], info: RunInfo | None, pid_has_own_tid: bool) -> LaneRole:
    """main / interop / intra / autograd / other.

    A run of ours lists its threads (`RunInfo.thread_roles_known`): the inter-op pool is exactly its
    `interop_tids` and the intra-op workers its `intra_tids`, whatever the threads are named (OpenMP
    workers started by a pool thread inherit its name). Other traces go by thread names (kineto
    writes 'thread N (PTThreadPool)'). Some traces name several threads 'pt_main_thread'; the main
    thread is the one whose tid is the pid, and the name decides only when no thread has the pid's id.
    """
    joined = " ".join(names).lower()
    if info is not None and info.thread_roles_known:
        if tid == info.main_tid:
            return "main"
        if tid in info.interop_tids:
            return "interop"
        if tid in info.intra_tids:
            return "intra"
    elif "ptthreadpool" in joined or "interop" in joined:
        return "interop"
    if "autograd" in joined:
        return "autograd"
    if tid == pid or (not pid_has_own_tid and ("pt_main_thread" in joined or "mainthread" in joined)):
        return "main"
    return "other"


def _best_name(names: list[str], role: str, tid: int) -> str:
    keyword = {"interop": "ptthreadpool", "autograd": "autograd", "main": "main"}.get(role)
    if keyword:
        for n in names:
            if keyword in n.lower():
                return n
    return names[0] if names else f"thread {tid}"


# ---- assembly --------------------------------------------------------------------------------


class _Interner:
    """Running value -> id table across chunks; dict.fromkeys and map keep the loops in C."""

    def __init__(self) -> None:
        self.table: dict[Any, int] = {}

    def ids(self, values: list[Any]) -> np.ndarray:
        table = self.table
        for v in dict.fromkeys(values):
            if v not in table:
                table[v] = len(table)
        return np.fromiter(map(table.__getitem__, values), dtype=np.int32, count=len(values))


#: What the load does with an event, by its phase ("[memory]" events are told by name).
_KIND_OF_PHASE = {"X": 1, "M": 2, "C": 3, "s": 4, "f": 4, "t": 4}
_COMPLETE, _META, _COUNTER, _FLOW, _MEMORY = 1, 2, 3, 4, 5
_get_ph, _get_name, _get_cat = attrgetter("ph"), attrgetter("name"), attrgetter("cat")
_get_pid = attrgetter("pid")
_get_ts, _get_dur, _get_args = attrgetter("ts"), attrgetter("dur"), attrgetter("args")
#: From this many events on, a forked child decodes the second half while this process decodes the
#: first (`forked.ForkedCall`): below it, forking and sending columns back cost more than they save.
PARALLEL_MIN_EVENTS = 150_000
#: The least time the reader waits for its child to begin sending, once its own half is done.
CHILD_WAIT_FLOOR_S = 5.0


def _picked(items: list[Any], index: np.ndarray) -> list[Any]:
    return list(map(items.__getitem__, index.tolist()))


class _Part(msgspec.Struct, gc=False):
    """What one range of a trace's events decodes to: complete events as columns (ids into the
    part's own tables), `[memory]` events as columns, and where the other events are (positions in
    the trace's event list) for the few that are read later. The forked child sends it through a
    pipe (`write_to`, `read_from`): a msgpack header, then each array's bytes as they are. No
    pickle, nothing that runs code, no copy of the columns on either side."""

    keys: list[tuple[Any, Any]]  # (pid, tid) as written, of threads not packed (`_thread_codes`)
    names: list[str]
    cats: list[str]
    columns: dict[str, np.ndarray]  # thread, name_id, cat_id, start, dur, index (complete events)
    memory: dict[str, np.ndarray]  # `_memory_columns`, empty without [memory] events
    meta: np.ndarray  # positions of metadata, counter and flow events
    counter: np.ndarray
    flow: np.ndarray

    def _arrays(self) -> list[tuple[str, str, np.ndarray]]:
        return [
            *(("columns", k, v) for k, v in self.columns.items()),
            *(("memory", k, v) for k, v in self.memory.items()),
            *(("", k, getattr(self, k)) for k in ("meta", "counter", "flow")),
        ]

    def write_to(self, pipe: io.BufferedWriter) -> None:
        arrays = self._arrays()
        header = msgspec.msgpack.encode(
            {
                "keys": self.keys,
                "names": self.names,
                "cats": self.cats,
                "arrays": [(group, k, v.dtype.str, v.size) for group, k, v in arrays],
            }
        )
        pipe.write(len(header).to_bytes(8, "little"))
        pipe.write(header)
        for _, _, v in arrays:
            pipe.write(np.ascontiguousarray(v).data.cast("B"))

    @classmethod
    def read_from(cls, pipe: io.BufferedReader) -> _Part:
        header = _PART_HEADER.decode(_read_exact(pipe, int.from_bytes(_read_exact(pipe, 8), "little")))
        groups: dict[str, dict[str, np.ndarray]] = {"columns": {}, "memory": {}, "": {}}
        for group, name, dtype, size in header.arrays:
            array = np.empty(size, dtype=np.dtype(dtype))
            _read_exact(pipe, array.nbytes, into=array.data.cast("B"))
            groups[group][name] = array
        rest = groups[""]
        return cls(
            keys=header.keys, names=header.names, cats=header.cats, columns=groups["columns"],
            memory=groups["memory"], meta=rest["meta"], counter=rest["counter"], flow=rest["flow"],
        )  # fmt: skip


class _PartHeader(msgspec.Struct):
    keys: list[tuple[int | str, int | str]]
    names: list[str]
    cats: list[str]
    arrays: list[tuple[Literal["columns", "memory", ""], str, str, int]]


_PART_HEADER = msgspec.msgpack.Decoder(_PartHeader)


def _read_exact(pipe: io.BufferedReader, n: int, into: memoryview | None = None) -> bytes:
    """n bytes from the pipe (into `into` when given); EOFError if it ends first."""
    buf = into if into is not None else memoryview(bytearray(n))
    got = 0
    while got < n:
        k = pipe.readinto(buf[got:])
        if not k:
            raise EOFError(f"the pipe ended after {got} of {n} bytes")
        got += k
    return b"" if into is not None else bytes(buf)


def _joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


def _decode_range(raw_events: list[Any], lo: int, hi: int, report: Callable[[float], None]) -> _Part:
    """Decode events lo..hi-1 of the trace, `_CHUNK` at a time (see `_CHUNK`); `report(fraction)`
    before each chunk. Reads `raw_events` and never changes it (a forked child runs this too)."""
    memory_parts: list[dict[str, np.ndarray]] = []
    meta_at: list[np.ndarray] = []
    counter_at: list[np.ndarray] = []
    flow_at: list[np.ndarray] = []
    key_intern, name_intern, cat_intern = _Interner(), _Interner(), _Interner()
    key_parts, name_parts, cat_parts, start_parts, dur_parts, at_parts = [], [], [], [], [], []
    for c in range(lo, hi, _CHUNK):
        report((c - lo) / (hi - lo))
        chunk_raws = raw_events[c : min(c + _CHUNK, hi)]
        chunk = list(map(_EVENT_DECODER.decode, chunk_raws))
        # Sort events by kind with maps and numpy rather than a Python loop over events.
        kinds = np.fromiter(
            map(_KIND_OF_PHASE.get, map(_get_ph, chunk), itertools.repeat(0)), dtype=np.int8, count=len(chunk)
        )
        flow_at.append(np.flatnonzero(kinds == _FLOW) + c)
        # Instant, metadata and counter events: "[memory]" by name (flows are never memory).
        other = np.flatnonzero((kinds != _COMPLETE) & (kinds != _FLOW))
        if other.size:
            others = _picked(chunk, other)
            is_memory = np.fromiter(map("[memory]".__eq__, map(_get_name, others)), dtype=bool, count=len(others))
            other_kind = kinds[other]
            other_kind[is_memory] = _MEMORY
            if is_memory.any():
                memory_parts.append(_memory_columns(_picked(chunk_raws, other[is_memory])))
            meta_at.append(other[other_kind == _META] + c)
            counter_at.append(other[other_kind == _COUNTER] + c)
        at = np.flatnonzero(kinds == _COMPLETE)
        complete = _picked(chunk, at)
        del chunk, chunk_raws
        pids = list(map(_get_pid, complete))
        try:
            np.array(pids, dtype=np.int64)
        except (ValueError, TypeError, OverflowError):
            # Pseudo processes ("Spans", "Traces") have string pids: not real lanes.
            real = [k for k, e in enumerate(complete) if type(e.pid) is int or _real_id(e.pid) is not None]
            complete, at = _picked(complete, np.array(real, dtype=np.int64)), at[real]
            pids = list(map(_get_pid, complete))
        at_parts.append(at + c)
        key_parts.append(_thread_codes(pids, list(map(_get_tid, complete)), key_intern))
        name_parts.append(name_intern.ids(list(map(_get_name, complete))))
        cat_parts.append(cat_intern.ids(list(map(_get_cat, complete))))
        start_parts.append(_ns_column(list(map(_get_ts, complete)), "timestamp"))
        durations = list(map(_get_dur, complete))
        if None in durations:
            durations = [0 if d is None else d for d in durations]
        dur_parts.append(_ns_column(durations, "duration"))
        del complete
    memory = {k: np.concatenate([m[k] for m in memory_parts]) for k in memory_parts[0]} if memory_parts else {}
    return _Part(
        keys=list(key_intern.table),
        names=list(name_intern.table),
        cats=list(cat_intern.table),
        columns={
            "thread": _joined(key_parts, np.int64),
            "name_id": _joined(name_parts, np.int32),
            "cat_id": _joined(cat_parts, np.int32),
            "start": _joined(start_parts, np.int64),
            "dur": _joined(dur_parts, np.int64),
            "index": _joined(at_parts, np.int64),
        },
        memory=memory,
        meta=_joined(meta_at, np.int64),
        counter=_joined(counter_at, np.int64),
        flow=_joined(flow_at, np.int64),
    )


#: An event's thread in one int64 (`_thread_codes`): its pid in the high half and its tid in the
#: low half, where both were written as ints that fit 32 bits (nearly every trace). Else the high
#: half is `_AS_WRITTEN` (a pid never packed) and the low half the id of (pid, tid) as written.
_AS_WRITTEN = -(1 << 31)
_LOW = 0xFFFFFFFF


def _thread_codes(pids: list[Any], tids: list[Any], keys: _Interner) -> np.ndarray:
    """Events' threads as codes (see `_AS_WRITTEN`): a million threads written as ints cost no
    Python object each, and 8 bytes an event. Threads written otherwise (a string id, "stream
    7", an int past 32 bits) are interned as written into `keys`."""
    n = len(pids)
    if n and list(map(type, pids)).count(int) == n and list(map(type, tids)).count(int) == n:
        try:
            p, t = np.array(pids, dtype=np.int64), np.array(tids, dtype=np.int64)
        except OverflowError:
            pass
        else:
            if _AS_WRITTEN < p.min() and p.max() < 1 << 31 and _AS_WRITTEN <= t.min() and t.max() < 1 << 31:
                return (p << 32) | (t & _LOW)
    return (np.int64(_AS_WRITTEN) << 32) | keys.ids(list(zip(pids, tids))).astype(np.int64)


def _split_thread_codes(code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes (`_thread_codes`) as pid, tid (both 0 for a thread written otherwise) and key id
    (-1 for a thread given by its code)."""
    pid = code >> 32
    low = code & _LOW
    written = pid == _AS_WRITTEN
    tid = np.where(written, 0, (low ^ 0x80000000) - 0x80000000)
    return np.where(written, 0, pid), tid, np.where(written, low, -1)


def _decode_events(raw_events: list[Any], report: _Progress) -> list[_Part]:
    """All events as parts in order: one, or with a large trace and a second core, two (the
    second decoded by a forked child, or here when the child fails: then errors are ours)."""
    total = len(raw_events)
    helper = None
    if total >= PARALLEL_MIN_EVENTS and forked.cores() >= 2:
        mid = total // 2
        helper = forked.ForkedCall.start(lambda pipe: _decode_range(raw_events, mid, total, lambda _f: None).write_to(pipe))
    if helper is None:
        return [_decode_range(raw_events, 0, total, lambda f: report("events", f))]
    try:
        started = time.monotonic()
        first = _decode_range(raw_events, 0, mid, lambda f: report("events", 0.9 * f))
        report("events", 0.9)
        # The child's half is as large as ours: past twice our time (and a floor) it is stuck or
        # starved, and we do its half ourselves rather than wait on.
        waited = max(2 * (time.monotonic() - started), CHILD_WAIT_FLOOR_S)
        second = helper.result(_Part.read_from, waiting=lambda: report("events", 0.9), timeout=waited)
        if second is None:
            second = _decode_range(raw_events, mid, total, lambda f: report("events", 0.9 + 0.1 * f))
        return [first, second]
    finally:
        helper.stop()


def _merge_parts(parts: list[_Part]) -> tuple[dict[Any, int], list[str], list[str], dict[str, np.ndarray]]:
    """One set of tables and columns from parts in order: each later part's ids are mapped into
    the first part's tables (grown by the values it lacks)."""
    key_table: dict[Any, int] = {k: i for i, k in enumerate(parts[0].keys)}
    name_table: dict[Any, int] = {k: i for i, k in enumerate(parts[0].names)}
    cat_table: dict[Any, int] = {k: i for i, k in enumerate(parts[0].cats)}
    columns: dict[str, list[np.ndarray]] = {k: [v] for k, v in parts[0].columns.items()}
    for part in parts[1:]:
        tables: tuple[tuple[dict[Any, int], list[Any], str], ...] = (
            (key_table, part.keys, "thread"),
            (name_table, part.names, "name_id"),
            (cat_table, part.cats, "cat_id"),
        )
        for table, values, column in tables:
            ids = np.array([table.setdefault(v, len(table)) for v in values], dtype=np.int32)
            col = part.columns[column]
            if column == "thread":  # only the threads interned as written take this part's ids
                if ids.size:
                    col = col.copy()
                    written = np.flatnonzero((col >> 32) == _AS_WRITTEN)
                    col[written] = (np.int64(_AS_WRITTEN) << 32) | ids[col[written] & _LOW].astype(np.int64)
                columns[column].append(col)
            else:
                columns[column].append(ids[col] if ids.size else col)
        for k in ("start", "dur", "index"):
            columns[k].append(part.columns[k])
    return key_table, list(name_table), list(cat_table), {k: np.concatenate(v) for k, v in columns.items()}


def _build(path: str, raw_events: list[Any], metadata: dict[str, Any], report: _Progress) -> Trace:
    parts = _decode_events(raw_events, report)
    raw_keys, names, cats, col = _merge_parts(parts)
    name_id, cat_id, start_ns, dur_ns = col["name_id"], col["cat_id"], col["start"], col["dur"]
    thread = col["thread"]
    if dur_ns.size and dur_ns.min() < 0:
        raise TraceFormatError(f"{path}: negative duration in a complete event")
    # Complete events keep their whole text for `args` (read on demand); the rest is dropped.
    raw_args = _picked(raw_events, col["index"])
    flow_raws = _picked(raw_events, np.concatenate([p.flow for p in parts]))
    meta_events = list(map(_WITH_ARGS_DECODER.decode, _picked(raw_events, np.concatenate([p.meta for p in parts]))))
    counter_raws = _picked(raw_events, np.concatenate([p.counter for p in parts]))
    counter_events = list(map(_WITH_ARGS_DECODER.decode, counter_raws))
    raw_events.clear()
    memory_parts = [p.memory for p in parts if p.memory]
    del parts, col, counter_raws

    report("memory", 0.0)
    memory = _memory_series(memory_parts, metadata)
    counters = _counter_tracks(counter_events)
    report("lanes", 0.0)
    process_labels, thread_names = _read_metadata_events(meta_events)
    info = RunInfo.parse(metadata.get("branchscope"))

    gpu_cat = np.array([c in GPU_CATEGORIES for c in cats], dtype=bool)
    lane, lanes, lane_lookup = _lanes(raw_keys, thread, gpu_cat[cat_id], process_labels, thread_names, info)
    del thread
    flow_binder = (
        (lambda trace: bind_flows(trace, flow_point_columns(flow_raws, lane_lookup()))) if flow_raws else None
    )

    report("lanes", 0.2)
    trace = build_trace(
        path=path,
        start_ns=start_ns,
        dur_ns=dur_ns,
        lane=lane,
        name_id=name_id,
        cat_id=cat_id,
        names=names,
        cats=cats,
        lanes=lanes,
        memory=memory,
        counters=counters,
        metadata=metadata,
        raw_args=raw_args,
        flow_binder=flow_binder,
    )
    report("lanes", 1.0)
    return trace


def _alike(*columns: np.ndarray) -> list[np.ndarray]:
    """The columns as object arrays if any of them is one (ids past int64), else as they are."""
    if any(c.dtype == object for c in columns):
        return [c.astype(object) for c in columns]
    return list(columns)


def _find(values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Where each query is in the sorted distinct `values`, -1 where it is not."""
    values, queries = _alike(values, queries)
    if values.size == 0:
        return np.full(queries.size, -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(values, queries), values.size - 1)
    return np.where(values[at] == queries, at, -1)


def _threads(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (pid, tid) pairs of the events, sorted: their pids, their tids, where each
    appears first, and each event's pair (int64).

    Each pair is one integer, (pid - least pid) * tid range + (tid - least tid): counted into that
    space where it is small (one thread, a million consecutive tids: no sort at all), else sorted."""
    n = pid.size
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return pid[:0], tid[:0], empty, empty
    if pid.dtype != object and tid.dtype != object:
        p0, t0 = int(pid.min()), int(tid.min())
        p_range, t_range = int(pid.max()) - p0 + 1, int(tid.max()) - t0 + 1
        if p_range * t_range < 1 << 62:
            code = (pid - p0) * t_range + (tid - t0)
            if p_range * t_range <= max(4 * n, 1 << 16):
                pairs = np.flatnonzero(np.bincount(code, minlength=p_range * t_range))
                slot = np.empty(p_range * t_range, dtype=np.int64)
                slot[pairs] = np.arange(pairs.size, dtype=np.int64)
                thread_of_event = slot[code]
                first = np.full(pairs.size, n, dtype=np.int64)
                np.minimum.at(first, thread_of_event, np.arange(n, dtype=np.int64))
            else:
                pairs, first, thread_of_event = np.unique(code, return_index=True, return_inverse=True)
            return pairs // t_range + p0, pairs % t_range + t0, first, thread_of_event.reshape(-1)
    # Ids past int64, or spread over its whole range: each pair by its pid's and tid's ranks.
    pids, pid_rank = np.unique(pid, return_inverse=True)
    tids, tid_rank = np.unique(tid, return_inverse=True)
    code = pid_rank.reshape(-1).astype(np.int64) * tids.size + tid_rank.reshape(-1)
    pairs, first, thread_of_event = np.unique(code, return_index=True, return_inverse=True)
    return pids[pairs // tids.size], tids[pairs % tids.size], first, thread_of_event.reshape(-1)


def _lanes(
    raw_keys: dict[Any, int],
    thread: np.ndarray,
    gpu_event: np.ndarray,
    process_labels: dict[int, str],
    thread_names: dict[tuple[int, int], list[str]],
    info: RunInfo | None,
) -> tuple[np.ndarray, LaneTable, Callable[[], dict[tuple[Any, Any], int]]]:
    """One lane per (pid, tid) as numbers (123 and "123" are the same thread, "stream 7" is stream
    7): each event's lane (int32), the lanes, and a maker of the {(pid, tid) as written: lane} map
    that flows are bound with (made only when they are: a million threads' map takes half a second).

    A lane is a GPU stream when an event of it has a GPU category, its tid was written "stream N",
    or its process is labelled "GPU N" (and not also "CPU"). Lanes are ordered CPU by (pid, role,
    tid), GPU by (device, stream), then by first appearance. All of it runs on columns, one row per
    lane: only threads written otherwise than as two ints, and threads with a name or a role the
    run lists, take a Python step each.
    """
    pid, tid, key_id = _split_thread_codes(thread)
    # Threads written otherwise than as ints, as numbers (`_thread_codes`: they are few).
    synthetic_tids: dict[str, int] = {}
    odd_pid, odd_tid, odd_stream = [], [], []
    for raw_pid, raw_tid in raw_keys:
        p = _real_id(raw_pid)
        assert p is not None  # only events of real processes are given lanes (see the decode loop)
        odd_pid.append(p)
        odd_tid.append(_lane_tid(raw_tid, synthetic_tids))
        odd_stream.append(isinstance(raw_tid, str) and _STREAM_TID.match(raw_tid.strip()) is not None)
    odd = np.flatnonzero(key_id >= 0)
    if odd.size:
        pid, odd_p = _alike(pid, _int_column(odd_pid))
        tid, odd_t = _alike(tid, _int_column(odd_tid))
        pid, tid = pid.copy(), tid.copy()
        pid[odd], tid[odd] = odd_p[key_id[odd]], odd_t[key_id[odd]]

    t_pid, t_tid, first, thread_of_event = _threads(pid, tid)
    n = t_pid.size

    def thread_of(qp: list[int], qt: list[int]) -> np.ndarray:
        """The thread of each (pid, tid) asked for, -1 where there is none."""
        pids, pid_rank = np.unique(t_pid, return_inverse=True)
        tids, tid_rank = np.unique(t_tid, return_inverse=True)
        pairs = pid_rank.astype(np.int64) * tids.size + tid_rank  # ascending: threads are sorted
        at_p, at_t = _find(pids, _int_column(qp)), _find(tids, _int_column(qt))
        found = _find(pairs, at_p.astype(np.int64) * tids.size + at_t)
        return np.where((at_p >= 0) & (at_t >= 0), found, -1)

    gpu = np.bincount(thread_of_event, weights=gpu_event, minlength=n) > 0
    if odd.size and any(odd_stream):
        stream_event = odd[np.array(odd_stream, dtype=bool)[key_id[odd]]]
        gpu[thread_of_event[stream_event]] = True
    cpu_label_pids = {p for p, label in process_labels.items() if label.strip().upper() == "CPU"}
    label_device = {p: int(m.group(1)) for p, label in process_labels.items() if (m := _GPU_LABEL.search(label))}
    device = np.maximum(t_pid, 0)
    if label_device:
        labelled = sorted(label_device)
        at = _find(_int_column(labelled), t_pid)
        has = at >= 0
        device, devices = _alike(device, _int_column([label_device[p] for p in labelled]))
        device = device.copy()
        device[has] = devices[at[has]]
        gpu |= _find(_int_column([p for p in labelled if p not in cpu_label_pids]), t_pid) >= 0
    device = np.where(gpu, device, -1)

    # Roles: a thread without a name or a role listed by the run is the main thread when its tid
    # is its pid, else "other" (what `_role` says of it); the others are asked one by one.
    own_tid = t_pid == t_tid
    main, other, stream = (ROLE_ORDER.index(r) for r in ("main", "other", "stream"))
    role = np.where(gpu, stream, np.where(own_tid, main, other))
    special = np.zeros(n, dtype=bool)
    if thread_names:
        named = thread_of([p for p, _ in thread_names], [t for _, t in thread_names])
        special[named[named >= 0]] = True
    if info is not None and info.thread_roles_known:
        listed = [*([] if info.main_tid is None else [info.main_tid]), *info.interop_tids, *info.intra_tids]
        special |= _find(np.unique(_int_column(listed)), t_tid) >= 0
    special &= ~gpu
    names: dict[int, str] = {}
    if special.any():
        pid_has_own_tid = _find(np.unique(t_pid[own_tid]), t_pid) >= 0
        for k in np.flatnonzero(special).tolist():
            p, t = int(t_pid[k]), int(t_tid[k])
            tnames = thread_names.get((p, t), [])
            r = _role(p, t, tnames, info, bool(pid_has_own_tid[k]))
            role[k] = ROLE_ORDER.index(r)
            names[k] = _best_name(tnames, r, t)

    # Order: CPU by (pid, role, tid), GPU by (device, stream); ties (GPU streams of two processes
    # on one device) by first appearance.
    order = np.lexsort(
        (first, np.where(gpu, 0, t_tid), np.where(gpu, t_tid, role), np.where(gpu, device, t_pid), gpu)
    )
    lane_of_thread = np.empty(n, dtype=np.int32)
    lane_of_thread[order] = np.arange(n, dtype=np.int32)
    table = LaneTable(
        kind=gpu[order].astype(np.int8),
        pid=t_pid[order],
        tid=t_tid[order],
        role=role[order],
        device=device[order],
        names={int(lane_of_thread[k]): name for k, name in names.items()},
    )
    lane = lane_of_thread[thread_of_event] if thread_of_event.size else np.zeros(0, dtype=np.int32)

    # For flows: the lanes of the pairs of ints seen, and of each pair written otherwise.
    plain = np.zeros(len(table), dtype=bool)
    plain[lane[key_id < 0]] = True
    odd_lane = np.zeros(len(raw_keys), dtype=np.int32)
    odd_lane[key_id[odd]] = lane[odd]

    def lane_lookup() -> dict[tuple[Any, Any], int]:
        where = np.flatnonzero(plain)
        lookup = dict(zip(zip(table.pid[where].tolist(), table.tid[where].tolist()), where.tolist()))
        lookup.update(zip(raw_keys, odd_lane.tolist()))
        return lookup

    return lane, table, lane_lookup


def _decode_args(events: list[_WithArgs]) -> list[Any]:
    """Decode many events' args in one call: one JSON array is far cheaper than N decodes."""
    if not events:
        return []
    blob = b"[" + b",".join(bytes(e.args) or b"null" for e in events) + b"]"
    return _ANY_DECODER.decode(blob)


def _read_metadata_events(
    meta_events: list[_WithArgs],
) -> tuple[dict[int, str], dict[tuple[int, int], list[str]]]:
    process_labels: dict[int, str] = {}
    thread_names: dict[tuple[int, int], list[str]] = {}
    for e, args in zip(meta_events, _decode_args(meta_events)):
        if not isinstance(args, dict):
            continue
        pid = _real_id(e.pid)
        if pid is None:
            continue
        if e.name == "process_labels" and isinstance(args.get("labels"), str):
            process_labels[pid] = args["labels"]
        elif e.name == "thread_name" and isinstance(args.get("name"), str):
            tid = _real_id(e.tid)
            if tid is not None:
                names = thread_names.setdefault((pid, tid), [])
                if args["name"] not in names:
                    names.append(args["name"])
    return process_labels, thread_names


#: c10::DeviceType values seen in `[memory]` events (ROCm reports its GPUs as CUDA, type 1).
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia", 20: "privateuseone"}


def _device_name(device_type: int, device_id: int) -> str:
    kind = _DEVICE_TYPES.get(device_type, f"device{device_type}")
    return kind if kind == "cpu" else f"{kind}:{device_id}"


def _capacities(metadata: dict[str, Any]) -> dict[int, int]:
    """GPU index -> totalGlobalMem from the trace's deviceProperties (what is well formed of it)."""
    props = metadata.get("deviceProperties")
    out: dict[int, int] = {}
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and type(p.get("id")) is int and type(p.get("totalGlobalMem")) is int:
                out[p["id"]] = p["totalGlobalMem"]
    return out


def _int64(values: list[int], what: str) -> np.ndarray:
    """An int64 column; addresses at or above 2**63 wrap (they are compared, never added)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        if any(v < -(1 << 63) or v >= 1 << 64 for v in values):
            raise ValueError(f"[memory] {what} out of range") from None
        return np.array([v - (1 << 64) if v >= 1 << 63 else v for v in values], dtype=np.int64)


def _real_ids(values: list[Any]) -> np.ndarray:
    """pids or tids as int64, -1 for pseudo ones ("Spans", "")."""
    try:
        return np.array(values, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        return np.array([-1 if (r := _real_id(v)) is None else r for v in values], dtype=np.int64)


def _memory_columns(raws: list[msgspec.Raw]) -> dict[str, np.ndarray]:
    """`[memory]` events (their texts) as columns."""
    try:
        events = list(map(_MEMORY_EVENT_DECODER.decode, raws))
    except msgspec.ValidationError as exc:
        raise ValueError(f"[memory] event: {exc}") from None
    args = list(map(_get_args, events))
    totals = list(map(_get_total, args))
    reserved = list(map(_get_reserved, args))
    return {
        "ts": _ns_column(list(map(_get_ts, events)), "memory timestamp"),
        "pid": _real_ids(list(map(_get_pid, events))),
        "tid": _real_ids(list(map(_get_tid, events))),
        "device_type": np.array(list(map(_get_device_type, args)), dtype=np.int64),
        "device_id": np.array(list(map(_get_device_id, args)), dtype=np.int64),
        "bytes": _int64_or_none(list(map(_get_bytes, args)), "Bytes", 0),
        "has_total": _known(totals),
        "total": _int64_or_none(totals, "Total Allocated", 0),
        "has_reserved": _known(reserved),
        "reserved": _int64_or_none(reserved, "Total Reserved", 0),
        "addr": _int64_or_none(list(map(_get_addr, args)), "Addr", -1),
    }


def _known(values: list[Any]) -> np.ndarray:
    """Where `values` is not None."""
    if None not in values:
        return np.ones(len(values), dtype=bool)
    # is_not(None, v) is a real bool; None.__ne__(v) returned NotImplemented for every value that
    # is not None, which only worked through NotImplemented's truth value (deprecated in Python 3.9).
    return np.fromiter(map(is_not, itertools.repeat(None), values), dtype=bool, count=len(values))


def _int64_or_none(values: list[int | None], what: str, missing: int) -> np.ndarray:
    """An int64 column, `missing` for None; addresses at or above 2**63 wrap (they are compared,
    never added), any other value out of int64's range is an error."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, OverflowError):
        pass
    filled = [missing if v is None else v for v in values]
    if what != "Addr":
        try:
            return np.array(filled, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"[memory] {what} out of range") from None
    return _int64(filled, what)


_get_total, _get_reserved, _get_addr = attrgetter("total"), attrgetter("reserved"), attrgetter("addr")
_get_tid = attrgetter("tid")
_get_device_type, _get_device_id, _get_bytes = attrgetter("device_type"), attrgetter("device_id"), attrgetter("bytes")


def _device_pairs(device_type: np.ndarray, device_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (device type, device id) rows, sorted, and each event's row among them. Both
    fit 32 bits in every real trace: then one int64 key each, 10x faster than unique rows."""
    lo, hi = -(1 << 31), 1 << 31
    if device_type.size and lo <= min(device_type.min(), device_id.min()) and max(device_type.max(), device_id.max()) < hi:
        keys, which = np.unique((device_type << 32) + (device_id - lo), return_inverse=True)
        return np.stack([keys >> 32, (keys & 0xFFFFFFFF) + lo], axis=1), which.reshape(-1)
    pairs, which = np.unique(np.stack([device_type, device_id], axis=1), axis=0, return_inverse=True)
    return pairs, which.reshape(-1)


def _memory_series(parts: list[dict[str, np.ndarray]], metadata: dict[str, Any] | None = None) -> list[MemorySeries]:
    """Allocator events per device; the legacy format lacks `Total Allocated`: sum `Bytes` instead.

    Each series keeps per event the address (-1 without `Addr`), `Total Reserved` (None when any
    event lacks it) and the allocating thread; GPUs get their capacity from deviceProperties.
    """
    if not parts:
        return []
    metadata = metadata or {}
    col = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    capacity = _capacities(metadata)
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) and type(info.get("rank")) is int else None
    pairs, which = _device_pairs(col["device_type"], col["device_id"])
    devices = {_device_name(int(t), int(i)): k for k, (t, i) in enumerate(pairs.tolist())}
    by_device: dict[str, np.ndarray] = {}
    for device, k in devices.items():
        idx = np.flatnonzero(which == k)
        by_device[device] = idx if device not in by_device else np.sort(np.concatenate([by_device[device], idx]))
    series = []
    for device in sorted(by_device, key=lambda d: (d != "cpu", len(d), d)):
        idx = by_device[device]
        order = idx[np.argsort(col["ts"][idx], kind="stable")]
        delta = col["bytes"][order]
        total = col["total"][order] if col["has_total"][order].all() else np.cumsum(delta)
        kind, _, dev_id = device.partition(":")
        series.append(
            MemorySeries(
                device=device,
                ts_ns=col["ts"][order],
                delta_bytes=delta,
                total_bytes=total,
                addr=col["addr"][order],
                reserved_bytes=col["reserved"][order] if col["has_reserved"][order].all() else None,
                pid=col["pid"][order],
                tid=col["tid"][order],
                capacity_bytes=capacity.get(int(dev_id)) if kind in ("cuda", "hip") and dev_id else None,
                rank=rank,
            )
        )
    return series


def _counter_tracks(events: list[_WithArgs]) -> list[CounterTrack]:
    if not events:
        return []
    ts = _ns_column([e.ts for e in events], "counter timestamp")
    points: dict[tuple[int, int, str, str, str], tuple[list[int], list[float]]] = {}
    for i, (e, args) in enumerate(zip(events, _decode_args(events))):
        pid = _real_id(e.pid)
        if pid is None or not isinstance(args, dict):
            continue
        tid = _real_id(e.tid)
        for key, value in args.items():
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    continue
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            t, v = points.setdefault((pid, tid if tid is not None else 0, e.name, key, e.cat), ([], []))
            t.append(i)
            v.append(float(value))
    tracks = []
    for (pid, tid, name, key, cat), (idx, values) in points.items():
        t_ns = ts[np.array(idx, dtype=np.int64)]
        order = np.argsort(t_ns, kind="stable")
        tracks.append(
            CounterTrack(
                name=name, pid=pid, tid=tid, key=key, ts_ns=t_ns[order],
                values=np.array(values, dtype=np.float64)[order], cat=cat,
            )
        )
    tracks.sort(key=lambda c: (c.pid, c.tid, c.name, c.key))
    return tracks


def _flow_ts(e: _Event) -> int | None:
    try:
        return _to_ns(e.ts)
    except (ValueError, OverflowError):
        return None


def flow_point_columns(
    raws: list[msgspec.Raw], lane_lookup: dict[tuple[Any, Any], int]
) -> tuple[np.ndarray, ...] | None:
    """Flow endpoints as columns (phase, id, cat, lane, ts_ns, binds_enclosing, cat names).

    Called on first use of `Trace.flows`, not at load time: most views never draw arrows. An
    endpoint with a broken id or time is dropped (its arrow is not drawn) rather than failing a
    trace that has already loaded.
    """
    events = list(map(_FLOW_DECODER.decode, raws))
    pts, ts_list = [], []
    for e in events:
        if type(e.id) in (int, str) and (e.pid, e.tid) in lane_lookup:
            t = _flow_ts(e)
            if t is not None and abs(t) < _MAX_ABS_NS:
                pts.append(e)
                ts_list.append(t)
    if not pts:
        return None
    phase = np.array([{"s": 0, "t": 1, "f": 2}[e.ph] for e in pts], dtype=np.int8)
    ids: dict[Any, int] = {}
    flow_id = np.array([ids.setdefault(e.id, len(ids)) for e in pts], dtype=np.int64)
    cat_names: dict[str, int] = {}
    cat = np.array([cat_names.setdefault(e.cat, len(cat_names)) for e in pts], dtype=np.int32)
    lane = np.array([lane_lookup[(e.pid, e.tid)] for e in pts], dtype=np.int32)
    ts = np.array(ts_list, dtype=np.int64)
    enclosing = np.array([e.ph != "f" or e.bp == "e" for e in pts], dtype=bool)
    return (phase, flow_id, cat, lane, ts, enclosing, np.array(list(cat_names), dtype=object))
