"""Read a PyTorch allocator snapshot (`torch.cuda.memory._dump_snapshot`) as a `Trace`.

A snapshot is a pickle of plain dicts and lists: `segments` (what the allocator holds at the dump)
and `device_traces` (one list per device of `{action, addr, size, stream, time_us, frames}`). It
is read into a `Trace` with no events whose `memory` holds one `MemorySeries` per device that has
allocations, so that the views and `analyze_memory` treat it like a trace:

- allocated total: `alloc` adds `size`, `free_requested` (or the older `free`) takes it away, as
  torch's allocated-bytes counter does (a device whose trace has only `free_completed` uses that);
  the total is absolute: it starts from what the dump's segments hold as `active_allocated` less
  what the trace added, so memory allocated before recording began is counted;
- reserved total likewise from `segment_alloc`/`segment_map` and `segment_free`/`segment_unmap`
  against the segments' `total_size`;
- each event's allocation site (`MemorySeries.sites`): the innermost frame outside torch as
  `file:line:function` (the innermost frame when all are torch's; NO_OP without frames);
- times from `time_us`; entries without it take their position (µs) as their time.

A snapshot is untrusted, so it is not read by `pickle` but by `_unpickle`, a small stack machine
that knows only the opcodes of plain data (no global: no class, no function, nothing is run) and
bounds the memory it takes by a multiple of the file's size (`_MAX_EXPANSION`), counting what each
opcode builds before it builds the next, and before an allocation that one opcode could make huge
(a memo index, a declared length). Dict keys and set items must be strings or numbers that hash
without collisions, so that nothing deep is hashed and no dict takes quadratic time to build. The
file's size is checked against the memory left before it is read. What the memo lets a few bytes
repeat is bounded once unpickled too: a snapshot may hold one segment, block or entry per
`_BYTES_PER_ITEM` bytes and `_MAX_DEVICES` device traces, a frames list or a frame shared by
entries is read once (`_Sites`), and names in sites are cut at `_MAX_NAME` characters. Anything
else than plain data of the shape above is a `TraceFormatError` with one line.
"""

from __future__ import annotations

import gc
import itertools
import os
import pickletools
import re
import struct
import sys
from dataclasses import replace
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from branchscope.profiling.files import UnreadableFile, open_regular, read_head
from branchscope.profiling.trace.memory import NO_OP
from branchscope.profiling.trace.model import MemorySeries, Trace, TraceFormatError, build_trace
from branchscope.profiling.trace.reader import _memory_budget, _mib, check_trace_path

#: How many bytes of memory a byte of a snapshot may take once unpickled: `_unpickle` counts what
#: it builds and refuses a pickle past this multiple (plus `_SLACK`). Snapshots count 6x (frames
#: shared through the memo) to 16x (blocks without frames, the densest shape; 11x in fact);
#: one-byte opcodes that each build an object of 56 to 216 bytes (empty containers, 1-tuples)
#: would take far more.
_MAX_EXPANSION = 32
#: What any pickle may take beyond that, so that a small one's fixed costs never count against it.
_SLACK = 1 << 20
#: A snapshot's segments, blocks and trace entries take 30 bytes of it or more each (dicts of five
#: items or more): more of them than one every `_BYTES_PER_ITEM` bytes can only come from its memo
#: repeating them, and reading those would take time and memory out of proportion with the file.
_BYTES_PER_ITEM = 16
_MIN_ITEMS = 10_000
#: Device traces a snapshot may hold: each device, even one sharing another's trace, is a series.
_MAX_DEVICES = 1024
#: The distinct sites of a snapshot may take this many characters a byte of it (and `_SLACK`).
_SITE_CHARS_PER_BYTE = 4
#: Filenames and function names longer than this are cut in a site.
_MAX_NAME = 256
_INT64 = 1 << 63
#: The first bytes of a pickle of protocol 2 and above (PROTO opcode, then the protocol).
PICKLE_MAGIC = b"\x80"

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_ALLOCATED = {"alloc": 1}
_FREED = ("free_requested", "free")
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


class _Refused(Exception):
    """Why `_unpickle` does not read a pickle: one line, without the file's name."""


# What `_unpickle` counts for what it builds (bytes, CPython 3.11, 64-bit): a stack slot for each
# object pushed, plus the object when it is new (what pymalloc gives it: sizes round up to 16);
# new strings, bytes and containers, and what a container grows by, by sys.getsizeof.
_PUSH = 9  # 8, and the list's spare room
_INT = 32 + _PUSH
_FLOAT = 32 + _PUSH
_MEMO = 10  # a memo slot, with the list's spare room
_MARK = 8  # a mark's position in the list of marks...
_MARK_INT = 32  # ...and the int that holds it, past the small ints Python keeps
_TUPLE = 40 + _PUSH  # an empty tuple's size: each item adds 8
#: sys.getsizeof of the empty dict, list and set that SETITEMS, APPENDS and ADDITEMS fill.
_EMPTY_SIZE = {0x75: sys.getsizeof({}), 0x65: sys.getsizeof([]), 0x90: sys.getsizeof(set())}
#: What EMPTY_DICT, EMPTY_LIST and EMPTY_SET take: their size rounded up to pymalloc's 16 bytes.
_NEW = {new: (_EMPTY_SIZE[fill] + 15) & ~15 for new, fill in ((0x7D, 0x75), (0x5D, 0x65), (0x8F, 0x90))}

_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F64 = struct.Struct(">d").unpack_from
#: Runs of up to this many LONG_BINGET or BINGET are read at once (a list's shared frames).
_RUN = 64
#: The memo indices of a run of n LONG_BINGET (5 bytes each), by n.
_LONG_GET_RUNS = [struct.Struct("<" + "xI" * n).unpack_from for n in range(_RUN + 1)]
#: A memo slot that an index past the end skipped: an error when read.
_HOLE: Any = object()
#: hash(n) == n for integers nearer 0 than this; larger ones (and tuples, hashed from their items)
#: can be made to collide, and a dict of colliding keys takes quadratic time to build.
_HASH_SAFE = (1 << 61) - 1
_KEY_TYPES = frozenset({str, bytes, float, bool, type(None)})
#: Opcodes by name, for messages. `_unpickle` refuses those it does not know: globals and what
#: calls them, persistent ids, extensions, out-of-band buffers, and protocol 0's text forms (INT,
#: STRING, GET...), which pickle never writes with protocol 2 or more.
_OPCODE_NAMES = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}


def _shown(text: Any) -> str:
    """A name from a pickle, on one line and short."""
    if not isinstance(text, str):
        return "?"
    text = text[:80]
    return text if text.isprintable() else ascii(text)


def _check_key(key: Any) -> None:
    """Refuse a dict key or set item that is not a string or a number that hashes as itself."""
    kind = key.__class__
    if kind is int:
        if -_HASH_SAFE < key < _HASH_SAFE:
            return
        raise _Refused("a dict key or set item that is an integer of 61 bits or more: a snapshot's keys are strings")
    if kind not in _KEY_TYPES:
        raise _Refused(f"a dict key or set item of type {kind.__name__}: a snapshot's keys are strings")


def _too_big(what: str, limit: int) -> _Refused:
    return _Refused(
        f"{what} would take more than {_mib(limit)} of memory, {_MAX_EXPANSION} times the file's size "
        "(a snapshot takes half of that at most)"
    )


def _unpickle(data: bytes, limit: int) -> Any:
    """The plain data pickled in `data` (protocol 2 to 5), or `_Refused` with one line.

    A stack machine like pickle's own, for the opcodes of None, bools, ints, floats, strings,
    bytes, bytearrays, tuples, lists, dicts, sets and frozensets, and the memo. It counts the
    bytes of what it builds (see `_PUSH`...), checks the total against `limit` before each opcode
    and before one that could allocate much at once (a memo index past the end, a long string),
    and refuses every other opcode. The memo is a list that a large index would fill with holes,
    each one counted: pickle writes its indices from 0 on, one after the other.
    """
    end = len(data)
    view = memoryview(data)
    stack: list[Any] = []
    push = stack.append
    marks: list[int] = []
    fence = 0  # the position of the innermost mark: what lies below is out of reach
    memo: list[Any] = []
    memoize = memo.append
    holes = 0
    sizeof = sys.getsizeof
    cost = 0
    pos = 0
    op = -1
    try:
        while True:
            if cost > limit:
                raise _too_big("unpickling it", limit)
            op = data[pos]
            pos += 1
            if op == 0x6A or op == 0x68:  # LONG_BINGET, BINGET: most often runs (lists of shared frames)
                start = pos - 1
                indices: tuple[int, ...] | bytes
                if op == 0x6A:
                    pos += 4
                    while data[pos] == 0x6A and pos - start < _RUN * 5:
                        pos += 5
                    n = (pos - start) // 5
                    indices = _LONG_GET_RUNS[n](data, start)
                else:
                    pos += 1
                    while data[pos] == 0x68 and pos - start < _RUN * 2:
                        pos += 2
                    n = (pos - start) // 2
                    indices = data[start + 1:pos:2]
                try:
                    if n == 1:
                        value = memo[indices[0]]
                        if holes and value is _HOLE:
                            raise _Refused(f"no memo entry {indices[0]}")
                        push(value)
                    else:
                        values = itemgetter(*indices)(memo)
                        if holes and _HOLE in values:
                            raise _Refused("a memo entry read before it was written")
                        stack += values
                except IndexError:
                    raise _Refused(f"no memo entry {max(indices)}") from None
                cost += _PUSH * n
            elif op == 0x94:  # MEMOIZE
                if len(stack) <= fence:
                    raise _Refused("stack underflow")
                if holes:
                    holes = _put(memo, len(memo) - holes, stack[-1], holes)
                else:
                    memoize(stack[-1])
                cost += _MEMO
            elif op == 0x28:  # MARK
                fence = len(stack)
                marks.append(fence)
                cost += _MARK if fence < 256 else _MARK + _MARK_INT
            elif op == 0x8A:  # LONG1
                n = data[pos]
                pos += 1
                if pos + n > end:
                    raise _Refused("pickle data was truncated")
                push(int.from_bytes(data[pos:pos + n], "little", signed=True))
                pos += n
                cost += _INT + n
            elif op == 0x7D or op == 0x5D:  # EMPTY_DICT, EMPTY_LIST: most often memoized, then a MARK
                value = {} if op == 0x7D else []
                push(value)
                cost += _NEW[op] + _PUSH
                if data[pos] == 0x94 and not holes:
                    memoize(value)
                    cost += _MEMO
                    pos += 1
                    if data[pos] == 0x28:
                        fence = len(stack)
                        marks.append(fence)
                        cost += _MARK if fence < 256 else _MARK + _MARK_INT
                        pos += 1
            elif op == 0x75 or op == 0x65 or op == 0x90:  # SETITEMS, APPENDS, ADDITEMS
                if not marks:
                    raise _Refused(f"{_OPCODE_NAMES[op]} without a MARK")
                m = marks.pop()
                fence = marks[-1] if marks else 0
                if m <= fence:
                    raise _Refused("stack underflow")
                target = stack[m - 1]
                items = stack[m:]
                del stack[m:]
                if cost + 48 * len(items) > limit:
                    raise _too_big("unpickling it", limit)
                before = sizeof(target) if target else _EMPTY_SIZE[op]
                if op == 0x75:
                    if target.__class__ is not dict:
                        raise _Refused(f"SETITEMS on a {type(target).__name__}")
                    if len(items) & 1:
                        raise _Refused("SETITEMS with an odd number of items")
                    keys = items[::2]
                    for key in keys:
                        if key.__class__ is not str:
                            _check_key(key)
                    target.update(zip(keys, items[1::2]))
                elif op == 0x65:
                    if target.__class__ is not list:
                        raise _Refused(f"APPENDS on a {type(target).__name__}")
                    target.extend(items)
                else:
                    if target.__class__ is not set:
                        raise _Refused(f"ADDITEMS on a {type(target).__name__}")
                    for key in items:
                        _check_key(key)
                    target.update(items)
                cost += sizeof(target) - before
            elif op == 0x4B:  # BININT1
                push(data[pos])
                pos += 1
                cost += _PUSH
            elif op == 0x4D:  # BININT2
                push(data[pos] | data[pos + 1] << 8)
                pos += 2
                cost += _INT
            elif op == 0x8C:  # SHORT_BINUNICODE
                n = data[pos]
                pos += 1
                if pos + n > end:
                    raise _Refused("pickle data was truncated")
                value = data[pos:pos + n].decode("utf-8", "surrogatepass")
                push(value)
                pos += n
                # As many characters as bytes: ASCII, 49 bytes and one a character.
                cost += (64 + n if len(value) == n else sizeof(value)) + _PUSH
            elif op == 0x4A:  # BININT
                push(_I32(data, pos)[0])
                pos += 4
                cost += _INT
            elif op == 0x4E:  # NONE
                push(None)
                cost += _PUSH
            elif op == 0x88:  # NEWTRUE
                push(True)
                cost += _PUSH
            elif op == 0x89:  # NEWFALSE
                push(False)
                cost += _PUSH
            elif op == 0x47:  # BINFLOAT
                push(_F64(data, pos)[0])
                pos += 8
                cost += _FLOAT
            elif op == 0x85:  # TUPLE1
                if len(stack) <= fence:
                    raise _Refused("stack underflow")
                stack[-1] = (stack[-1],)
                cost += _TUPLE + 8
            elif op == 0x86:  # TUPLE2
                if len(stack) - 2 < fence:
                    raise _Refused("stack underflow")
                second = stack.pop()
                stack[-1] = (stack[-1], second)
                cost += _TUPLE + 16
            elif op == 0x87:  # TUPLE3
                if len(stack) - 3 < fence:
                    raise _Refused("stack underflow")
                third = stack.pop()
                second = stack.pop()
                stack[-1] = (stack[-1], second, third)
                cost += _TUPLE + 24
            elif op == 0x29:  # EMPTY_TUPLE
                push(())
                cost += _PUSH
            elif op == 0x71 or op == 0x72:  # BINPUT, LONG_BINPUT
                if op == 0x71:
                    index = data[pos]
                    pos += 1
                else:
                    index = _U32(data, pos)[0]
                    pos += 4
                if len(stack) <= fence:
                    raise _Refused("stack underflow")
                if index > len(memo):  # holes up to it, counted before they are made
                    cost += _MEMO * (index - len(memo))
                    if cost > limit:
                        raise _too_big(f"memo index {index}", limit)
                holes = _put(memo, index, stack[-1], holes)
                cost += _MEMO
            elif op == 0x58 or op == 0x8D:  # BINUNICODE, BINUNICODE8
                if op == 0x58:
                    n = _U32(data, pos)[0]
                    pos += 4
                else:
                    n = _U64(data, pos)[0]
                    pos += 8
                if n > end - pos:
                    raise _Refused("pickle data was truncated")
                if cost + 4 * n > limit:  # 4 bytes a character at most
                    raise _too_big("unpickling it", limit)
                value = str(view[pos:pos + n], "utf-8", "surrogatepass")
                push(value)
                pos += n
                cost += sizeof(value) + _PUSH
            elif op in (0x43, 0x42, 0x8E, 0x96, 0x55, 0x54):
                # SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8, SHORT_BINSTRING, BINSTRING
                if op == 0x43 or op == 0x55:
                    n = data[pos]
                    pos += 1
                elif op == 0x42:
                    n = _U32(data, pos)[0]
                    pos += 4
                elif op == 0x54:
                    n = _I32(data, pos)[0]
                    pos += 4
                    if n < 0:
                        raise _Refused("BINSTRING of a negative length")
                else:
                    n = _U64(data, pos)[0]
                    pos += 8
                if n > end - pos:
                    raise _Refused("pickle data was truncated")
                if cost + n > limit:
                    raise _too_big("unpickling it", limit)
                if op == 0x96:
                    value = bytearray(view[pos:pos + n])
                elif op == 0x55 or op == 0x54:  # a Python 2 str: pickle decodes it as ASCII
                    value = data[pos:pos + n].decode("ascii")
                else:
                    value = data[pos:pos + n]
                push(value)
                pos += n
                cost += sizeof(value) + _PUSH
            elif op == 0x8B:  # LONG4
                n = _I32(data, pos)[0]
                pos += 4
                if n < 0:
                    raise _Refused("LONG4 of a negative length")
                if n > end - pos:
                    raise _Refused("pickle data was truncated")
                push(int.from_bytes(view[pos:pos + n], "little", signed=True))
                pos += n
                cost += _INT + 2 * n
            elif op == 0x95:  # FRAME: a hint for reading, checked, then ignored
                n = _U64(data, pos)[0]
                pos += 8
                if n > end - pos:
                    raise _Refused("pickle data was truncated")
            elif op == 0x80:  # PROTO
                if data[pos] > 5:
                    raise _Refused(f"pickle protocol {data[pos]}, newer than 5")
                pos += 1
            elif op == 0x2E:  # STOP
                if len(stack) <= fence:
                    raise _Refused("stack underflow")
                return stack[-1]
            elif op == 0x61:  # APPEND
                if len(stack) - 2 < fence:
                    raise _Refused("stack underflow")
                value = stack.pop()
                target = stack[-1]
                if target.__class__ is not list:
                    raise _Refused(f"APPEND on a {type(target).__name__}")
                before = sizeof(target)
                target.append(value)
                cost += sizeof(target) - before
            elif op == 0x73:  # SETITEM
                if len(stack) - 3 < fence:
                    raise _Refused("stack underflow")
                value = stack.pop()
                key = stack.pop()
                target = stack[-1]
                if target.__class__ is not dict:
                    raise _Refused(f"SETITEM on a {type(target).__name__}")
                _check_key(key)
                before = sizeof(target)
                target[key] = value
                cost += sizeof(target) - before
            elif op in (0x74, 0x6C, 0x64, 0x91, 0x31):  # TUPLE, LIST, DICT, FROZENSET, POP_MARK
                if not marks:
                    raise _Refused(f"{_OPCODE_NAMES[op]} without a MARK")
                m = marks.pop()
                fence = marks[-1] if marks else 0
                items = stack[m:]
                del stack[m:]
                if cost + 48 * len(items) > limit:
                    raise _too_big("unpickling it", limit)
                if op == 0x74:
                    value = tuple(items)
                elif op == 0x6C:
                    value = items
                elif op == 0x64:
                    if len(items) & 1:
                        raise _Refused("DICT with an odd number of items")
                    keys = items[::2]
                    for key in keys:
                        _check_key(key)
                    value = dict(zip(keys, items[1::2]))
                elif op == 0x91:
                    for key in items:
                        _check_key(key)
                    value = frozenset(items)
                else:
                    continue
                push(value)
                cost += sizeof(value) + _PUSH
            elif op == 0x8F:  # EMPTY_SET
                push(set())
                cost += _NEW[op] + _PUSH
            elif op == 0x30:  # POP: an item, or a mark with nothing above it
                if marks and marks[-1] == len(stack):
                    marks.pop()
                    fence = marks[-1] if marks else 0
                elif len(stack) <= fence:
                    raise _Refused("stack underflow")
                else:
                    stack.pop()
            elif op == 0x32:  # DUP
                if len(stack) <= fence:
                    raise _Refused("stack underflow")
                push(stack[-1])
                cost += _PUSH
            elif op == 0x63:  # GLOBAL: module and name on two lines
                module_end = data.find(b"\n", pos)
                name_end = data.find(b"\n", module_end + 1) if module_end >= 0 else -1
                module = data[pos:module_end].decode("utf-8", "replace") if module_end >= 0 else "?"
                name = data[module_end + 1:name_end].decode("utf-8", "replace") if name_end >= 0 else "?"
                raise _Refused(f"refused global {_shown(module)}.{_shown(name)}: a snapshot holds only plain data")
            elif op == 0x93:  # STACK_GLOBAL: module and name from the stack
                module, name = (stack[-2], stack[-1]) if len(stack) >= 2 else ("?", "?")
                raise _Refused(f"refused global {_shown(module)}.{_shown(name)}: a snapshot holds only plain data")
            elif op in _OPCODE_NAMES:
                raise _Refused(f"refused opcode {_OPCODE_NAMES[op]}: a snapshot holds only plain data")
            else:
                raise _Refused(f"unknown opcode 0x{op:02x}")
    except (IndexError, struct.error):  # past the end of the data
        raise _Refused("pickle data was truncated") from None
    except (_Refused, MemoryError):
        raise
    except Exception as exc:  # a string that is not UTF-8, an unhashable key...
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise _Refused(f"{type(exc).__name__}: {text}" if text else type(exc).__name__) from None


def _put(memo: list[Any], index: int, value: Any, holes: int) -> int:
    """Store `value` at `index` of the memo, holes up to it; the number of holes after."""
    have = len(memo)
    if index < have:
        if memo[index] is _HOLE:
            holes -= 1
        memo[index] = value
    else:
        if index > have:
            memo.extend(itertools.repeat(_HOLE, index - have))
            holes += index - have
        memo.append(value)
    return holes


def is_snapshot(path: str | os.PathLike[str]) -> bool:
    """Whether a regular file starts like a pickle (protocol 2+), as snapshots do. Anything else
    (a FIFO would block the open for ever, a folder, /dev/zero) is not one."""
    head = read_head(path, 2)
    return len(head) == 2 and head[:1] == PICKLE_MAGIC and 2 <= head[1] <= 5


def rank_from_name(path: str | os.PathLike[str]) -> int | None:
    """The N of `rank-N` (or rank_N, rankN) in a file's name, if any."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _read(p: Path) -> tuple[Any, int]:
    """The object pickled in the file, and the file's size."""
    st = check_trace_path(p)
    budget = _memory_budget()
    if st.st_size * _MAX_EXPANSION > budget:
        raise TraceFormatError(
            f"{p}: too large to load: a snapshot of {_mib(st.st_size)} may need about "
            f"{_mib(st.st_size * _MAX_EXPANSION)} of memory, more than the {_mib(budget)} this process may still use"
        )
    try:
        with open(open_regular(p), "rb") as f:  # never blocks, should the path have become a FIFO
            data = f.read(st.st_size + 1)
    except UnreadableFile as exc:
        raise TraceFormatError(str(exc)) from None
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > st.st_size:
        raise TraceFormatError(f"{p}: grew while it was read")
    if not data:
        raise TraceFormatError(f"{p}: empty file")
    # Hundreds of thousands of new dicts and lists would trigger many useless cyclic-GC passes.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _unpickle(data, _MAX_EXPANSION * len(data) + _SLACK), len(data)
    except _Refused as exc:
        raise TraceFormatError(f"{p}: not a memory snapshot: {exc}") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
    finally:
        if gc_was_enabled:
            gc.enable()


def _is_torch(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return "torch" in parts or not filename.endswith(".py")


def _pick(frames: Any, torch: dict[str, bool]) -> dict[str, Any] | None:
    """The innermost frame outside torch (frames are innermost first), or the innermost frame when
    all are torch's; None without frames. `torch` remembers which filenames are torch's."""
    if type(frames) is not list:
        return None
    first = None
    for frame in frames:
        if type(frame) is dict:
            filename = frame.get("filename")
            if type(filename) is str:
                if first is None:
                    first = frame
                is_torch = torch.get(filename)
                if is_torch is None:
                    is_torch = torch[filename] = _is_torch(filename)
                if not is_torch:
                    return frame
    return first


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_NAME else text[:_MAX_NAME - 1] + "…"


def _site_text(frame: dict[str, Any]) -> str:
    # Only an int or a string is shown: str() of anything else could recurse or take gigabytes.
    line, name = frame.get("line"), frame.get("name")
    if type(line) is str:
        line = _cut(line)
    elif not (type(line) is int and -_HASH_SAFE < line < _HASH_SAFE):
        line = "?"
    return f"{_cut(frame['filename'])}:{line}:{_cut(name) if type(name) is str else '?'}"


def site_of(frames: Any) -> str:
    """`file:line:function` of the innermost frame outside torch (frames are innermost first);
    names longer than `_MAX_NAME` characters are cut."""
    frame = _pick(frames, {})
    return NO_OP if frame is None else _site_text(frame)


class _Sites:
    """`site_of` for all the entries of one snapshot, in time and memory bounded by the file's size
    however its memo shares frames: a long frames list shared by entries is read once, a frame
    picked by several lists is written out once, each filename is looked at once, and the
    distinct sites may take `budget` characters in all. Objects are known by their id, so an
    instance lives no longer than the snapshot it reads."""

    def __init__(self, budget: int) -> None:
        self._left = budget
        self._texts: dict[str, str] = {}
        self._of_list: dict[int, str] = {}
        self._of_frame: dict[int, str] = {}
        self._torch: dict[str, bool] = {}

    def __call__(self, frames: Any) -> str:
        long = type(frames) is list and len(frames) > 16
        text = self._of_list.get(id(frames)) if long else None
        if text is None:
            frame = _pick(frames, self._torch)
            if frame is None:
                text = NO_OP
            else:
                text = self._of_frame.get(id(frame))
                if text is None:
                    text = _site_text(frame)
                    known = self._texts.get(text)
                    if known is None:
                        self._left -= len(text)
                        if self._left < 0:
                            raise ValueError("its frames' sites take more characters than a snapshot of its size can hold")
                        self._texts[text] = text
                    else:
                        text = known
                    self._of_frame[id(frame)] = text
            if long:
                self._of_list[id(frames)] = text
        return text


def _int(v: Any, what: str) -> int:
    if type(v) is not int:
        raise ValueError(f"{what} is {type(v).__name__}, not an integer")
    if not -_INT64 <= v < _INT64:  # sums and products of larger ones could take minutes
        raise ValueError(f"{what} does not fit in 64 bits")
    return v


def _segment_totals(segments: list[dict[str, Any]], n_devices: int) -> tuple[list[int], list[int]]:
    """Per device 0..n_devices-1 (those with a trace), the bytes its segments' blocks hold as
    `active_allocated`, and its segments' `total_size`. Every segment's sizes are checked; those of
    other devices are not kept, so no device number from the file is ever hashed (numbers built to
    collide made a dict of them take minutes)."""
    held = [0] * n_devices
    reserved = [0] * n_devices
    for s in segments:
        device = s.get("device")
        if type(device) is not int:
            continue
        size = _int(s.get("total_size", 0), "segment size")
        blocks = s.get("blocks")
        active = 0
        if type(blocks) is list:
            active = sum(
                _int(b.get("size", 0), "block size")
                for b in blocks
                if type(b) is dict and b.get("state") == "active_allocated"
            )
        if 0 <= device < n_devices:
            reserved[device] += size
            held[device] += active
    return held, reserved


def _device_series(device: int, entries: list[Any], held: int, seg_total: int, site_text: _Sites) -> MemorySeries | None:
    actions = [e.get("action") for e in entries]
    odd = [a for a in actions if a.__class__ is not str and a is not None]
    if odd:  # not hashed: a deep tuple's hash recurses in C until the process dies
        raise ValueError(f"an action is {type(odd[0]).__name__}, not a string")
    kinds = set(actions)
    freed: tuple[str, ...] = _FREED if kinds & set(_FREED) else ("free_completed",)
    ts: list[int] = []
    delta: list[int] = []
    addr: list[int] = []
    site: list[int] = []
    reserved_at: list[int] = []
    sites: dict[str, int] = {}
    reserved = 0
    for position, (e, action) in enumerate(zip(entries, actions)):
        size = e.get("size", 0)
        if action in _RESERVED:
            reserved += _RESERVED[action] * _int(size, "segment size")
            continue
        sign = 1 if action in _ALLOCATED else -1 if action in freed else 0
        if sign == 0:
            continue
        t = e.get("time_us")
        ts.append(_int(t, "time_us") * 1000 if t is not None else position * 1000)
        delta.append(sign * _int(size, "size"))
        a = e.get("addr", -1)
        addr.append(_int(a, "addr") if a is not None else -1)
        site.append(sites.setdefault(site_text(e.get("frames")), len(sites)) if sign > 0 else -1)
        reserved_at.append(reserved)
    if not ts:
        return None
    # Absolute totals: the dump's state, less what the recorded events did.
    d = np.array(delta, dtype=np.int64)
    total = np.cumsum(d)
    total += max(held - int(total[-1]), 0)
    r = np.array(reserved_at, dtype=np.int64)
    r += max(seg_total - reserved, 0)
    t_ns = np.array(ts, dtype=np.int64)
    order = np.argsort(t_ns, kind="stable")
    if not np.all(order == np.arange(order.size)):
        t_ns, d, total, r = t_ns[order], d[order], total[order], r[order]
        addr, site = [addr[i] for i in order.tolist()], [site[i] for i in order.tolist()]
    return MemorySeries(
        device=f"cuda:{device}",
        ts_ns=t_ns,
        delta_bytes=d,
        total_bytes=total,
        addr=np.array(addr, dtype=np.int64),
        reserved_bytes=r,
        site_id=np.array(site, dtype=np.int32),
        sites=tuple(sites),
    )


def load_snapshot(path: str | os.PathLike[str], rank: int | None = None) -> Trace:
    """A snapshot as a `Trace` without events whose `memory` has one series per device.

    `rank` (default: the N of `rank-N` in the file's name) goes into the trace's distributedInfo,
    so that `merge_traces` names its devices `rankN/cuda:M`.
    """
    p = Path(path)
    obj, size = _read(p)
    if isinstance(obj, list):  # the oldest snapshots: the segments alone
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict) or not isinstance(obj.get("device_traces", []), list):
        raise TraceFormatError(f"{p}: not a memory snapshot: no 'segments' / 'device_traces'")
    if "segments" not in obj and "device_traces" not in obj:
        raise TraceFormatError(f"{p}: not a memory snapshot: no 'segments' / 'device_traces'")
    segments = obj.get("segments") or []
    traces = obj.get("device_traces") or []
    if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
        raise TraceFormatError(f"{p}: not a memory snapshot: 'segments' is not a list of objects")
    if len(traces) > _MAX_DEVICES:
        raise TraceFormatError(f"{p}: malformed snapshot: {len(traces):,} device traces, more than the {_MAX_DEVICES} a machine could have")
    items = len(segments) + len(traces) + sum(len(b) for s in segments if type(b := s.get("blocks")) is list)
    items += sum(len(entries) for entries in traces if type(entries) is list)
    if items > max(size // _BYTES_PER_ITEM, _MIN_ITEMS):
        raise TraceFormatError(
            f"{p}: malformed snapshot: {items:,} segments, blocks and entries in {size:,} bytes: "
            "its memo repeats them"
        )
    memory: list[MemorySeries] = []
    try:
        held, seg_total = _segment_totals(segments, len(traces))
        sites = _Sites(_SITE_CHARS_PER_BYTE * size + _SLACK)
        for device, entries in enumerate(traces):
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise ValueError(f"device_traces[{device}] is not a list of objects")
            series = _device_series(device, entries, held[device], seg_total[device], sites)
            if series is not None:
                memory.append(series)
    except (ValueError, TypeError, OverflowError) as exc:
        raise TraceFormatError(f"{p}: malformed snapshot: {exc}") from None
    except MemoryError:
        raise TraceFormatError(f"{p}: not enough memory to load it") from None
    if rank is None:
        rank = rank_from_name(p)
    metadata: dict[str, Any] = {"snapshot": True}
    if rank is not None:
        metadata["distributedInfo"] = {"rank": rank}
        memory = [replace(m, rank=rank) for m in memory]
    empty = np.zeros(0, dtype=np.int64)
    return build_trace(
        path=str(p), start_ns=empty, dur_ns=empty, lane=empty, name_id=empty, cat_id=empty,
        names=[], cats=[], lanes=[], memory=memory, metadata=metadata,
    )

