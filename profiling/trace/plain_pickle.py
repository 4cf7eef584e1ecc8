"""Reading a pickle of plain data from an untrusted file: no global, no class, nothing is run, and
memory bounded by what the input really holds.

`unpickle` is a stack machine like pickle's own, for the opcodes of None, bools, ints, floats,
strings, bytes, bytearrays, tuples, lists, dicts, sets and frozensets, and the memo (protocols 2 to
5). Each opcode is a small function of `_HANDLERS`; every other opcode is refused: globals and what
calls them, persistent ids, extensions, out-of-band buffers, and protocol 0's text forms (INT,
STRING, GET...), which pickle never writes with protocol 2 or more.

It counts the bytes of what it builds (see `PUSH`...), checks the total against the caller's limit
before each opcode and before one that could allocate much at once (a memo index past the end, a
long string, the items of a container). Dict keys and set items must be strings or numbers that hash
as themselves, so that nothing deep is hashed and no dict takes quadratic time to build. The memo
is a list that a large index would fill with holes, each one counted: pickle writes its indices from
0 on, one after the other.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from branchscope.profiling.trace.pickle_machine import (
    EMPTY_DICT,
    EMPTY_LIST,
    EMPTY_SET,
    FLOAT,
    HOLE,
    INT,
    ITEM,
    MARK,
    MARK_INT,
    MEMO,
    NEW_DICT,
    NEW_LIST,
    NEW_SET,
    OPCODE_NAMES,
    PUSH,
    TUPLE,
    Machine,
    Refused,
    check_key,
    put,
)

_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F64 = struct.Struct(">d").unpack_from
#: Runs of up to this many LONG_BINGET or BINGET are read at once (a list's shared frames).
_RUN = 64
#: The memo indices of a run of n LONG_BINGET (5 bytes each), by n.
_LONG_GET_RUNS = [struct.Struct("<" + "xI" * n).unpack_from for n in range(_RUN + 1)]
#: What a handler gives back once STOP has read the pickle's value (`_Machine.result`).
_STOPPED = -1


def _shown(text: Any) -> str:
    """A name from a pickle, on one line and short."""
    if not isinstance(text, str):
        return "?"
    text = text[:80]
    return text if text.isprintable() else ascii(text)




# ---------------------------------------------------------------- the memo

# Each handler takes the machine and the position after its opcode, and gives the position after
# what it read.


def _get(m: Machine, pos: int) -> int:
    """BINGET or LONG_BINGET, and those of the same opcode that follow it, read at once (most often
    they come in runs: lists of shared frames)."""
    data, start = m.data, pos - 1
    if data[start] == 0x6A:
        pos += 4
        while data[pos] == 0x6A and pos - start < _RUN * 5:
            pos += 5
        indices: tuple[int, ...] | bytes = _LONG_GET_RUNS[(pos - start) // 5](data, start)
    else:
        pos += 1
        while data[pos] == 0x68 and pos - start < _RUN * 2:
            pos += 2
        indices = data[start + 1 : pos : 2]
    memo = m.memo
    try:
        if len(indices) == 1:
            value = memo[indices[0]]
            if m.holes and value is HOLE:
                raise Refused(f"no memo entry {indices[0]}")
            m.stack.append(value)
        else:
            values = itemgetter(*indices)(memo)
            if m.holes and HOLE in values:
                raise Refused("a memo entry read before it was written")
            m.stack += values
    except IndexError:
        raise Refused(f"no memo entry {max(indices)}") from None
    m.cost += PUSH * len(indices)
    return pos


def _memoize(m: Machine, pos: int) -> int:
    stack = m.stack
    if len(stack) <= m.fence:
        raise Refused("stack underflow")
    if m.holes:
        m.holes = put(m.memo, len(m.memo) - m.holes, stack[-1], m.holes)
    else:
        m.memo.append(stack[-1])
    m.cost += MEMO
    return pos


def _put_at(m: Machine, index: int) -> None:
    """BINPUT, LONG_BINPUT: the top of the stack into the memo at `index`, holes before it counted first."""
    m.need(1)
    if index > len(m.memo):
        m.cost += MEMO * (index - len(m.memo))
        if m.cost > m.limit:
            raise m.too_big(f"memo index {index}")
    m.holes = put(m.memo, index, m.stack[-1], m.holes)
    m.cost += MEMO


def _binput(m: Machine, pos: int) -> int:
    _put_at(m, m.data[pos])
    return pos + 1


def _long_binput(m: Machine, pos: int) -> int:
    _put_at(m, _U32(m.data, pos)[0])
    return pos + 4


# ---------------------------------------------------------------- numbers and constants


def _pushes(value: Any, cost: int = PUSH) -> Callable[[Machine, int], int]:
    """The handler of an opcode that pushes `value` (NONE, NEWTRUE, NEWFALSE, EMPTY_TUPLE)."""

    def handler(m: Machine, pos: int) -> int:
        m.push(value, cost)
        return pos

    return handler


def _binint1(m: Machine, pos: int) -> int:
    m.stack.append(m.data[pos])
    m.cost += PUSH
    return pos + 1


def _binint2(m: Machine, pos: int) -> int:
    m.stack.append(m.data[pos] | m.data[pos + 1] << 8)
    m.cost += INT
    return pos + 2


def _binint(m: Machine, pos: int) -> int:
    m.stack.append(_I32(m.data, pos)[0])
    m.cost += INT
    return pos + 4


def _binfloat(m: Machine, pos: int) -> int:
    m.push(_F64(m.data, pos)[0], FLOAT)
    return pos + 8


def _long1(m: Machine, pos: int) -> int:
    data = m.data
    n = data[pos]
    pos += 1
    if pos + n > m.end:
        raise Refused("pickle data was truncated")
    m.stack.append(int.from_bytes(data[pos : pos + n], "little", signed=True))
    m.cost += INT + n
    return pos + n


def _long4(m: Machine, pos: int) -> int:
    n = _I32(m.data, pos)[0]
    pos += 4
    if n < 0:
        raise Refused("LONG4 of a negative length")
    m.length(pos, n)
    m.push(int.from_bytes(m.view[pos : pos + n], "little", signed=True), INT + 2 * n)
    return pos + n


# ---------------------------------------------------------------- strings and bytes


def _short_binunicode(m: Machine, pos: int) -> int:
    n = m.data[pos]
    pos += 1
    m.length(pos, n)
    value = m.data[pos : pos + n].decode("utf-8", "surrogatepass")
    # As many characters as bytes: ASCII, 49 bytes and one a character.
    m.push(value, (64 + n if len(value) == n else sys.getsizeof(value)) + PUSH)
    return pos + n


def _unicode(m: Machine, pos: int, n: int) -> int:
    """BINUNICODE, BINUNICODE8: `n` bytes of UTF-8 at `pos`."""
    m.length(pos, n)
    m.check_room(4 * n)  # 4 bytes a character at most
    value = str(m.view[pos : pos + n], "utf-8", "surrogatepass")
    m.push(value, sys.getsizeof(value) + PUSH)
    return pos + n


def _binunicode(m: Machine, pos: int) -> int:
    return _unicode(m, pos + 4, _U32(m.data, pos)[0])


def _binunicode8(m: Machine, pos: int) -> int:
    return _unicode(m, pos + 8, _U64(m.data, pos)[0])


def _bytes_of(
    make: Callable[[Machine, int, int], Any], length: Callable[[Machine, int], int], width: int
) -> Callable[[Machine, int], int]:
    """The handler of an opcode that pushes `make(m, pos, n)` of the `n` bytes after its length,
    which `length` reads at its position (`width` bytes)."""

    def handler(m: Machine, pos: int) -> int:
        n = length(m, pos)
        pos += width
        m.length(pos, n)
        m.check_room(n)
        value = make(m, pos, n)
        m.push(value, sys.getsizeof(value) + PUSH)
        return pos + n

    return handler


def _length1(m: Machine, pos: int) -> int:
    return m.data[pos]


def _length4(m: Machine, pos: int) -> int:
    return int(_U32(m.data, pos)[0])


def _length8(m: Machine, pos: int) -> int:
    return int(_U64(m.data, pos)[0])


def _binstring_length(m: Machine, pos: int) -> int:
    n = int(_I32(m.data, pos)[0])
    if n < 0:
        raise Refused("BINSTRING of a negative length")
    return n


def _as_bytes(m: Machine, pos: int, n: int) -> bytes:
    return m.data[pos : pos + n]


def _as_bytearray(m: Machine, pos: int, n: int) -> bytearray:
    return bytearray(m.view[pos : pos + n])


def _as_ascii(m: Machine, pos: int, n: int) -> str:
    """A Python 2 str: pickle decodes it as ASCII."""
    return m.data[pos : pos + n].decode("ascii")


# ---------------------------------------------------------------- containers


def _new_container(m: Machine, pos: int, value: dict[Any, Any] | list[Any], cost: int) -> int:
    """EMPTY_DICT, EMPTY_LIST, and the MEMOIZE and MARK that most often follow, read at once."""
    m.stack.append(value)
    m.cost += cost
    data = m.data
    if data[pos] == 0x94 and not m.holes:
        m.memo.append(value)
        m.cost += MEMO
        pos += 1
        if data[pos] == 0x28:
            m.fence = fence = len(m.stack)
            m.marks.append(fence)
            m.cost += MARK if fence < 256 else MARK + MARK_INT
            pos += 1
    return pos


def _empty_dict(m: Machine, pos: int) -> int:
    return _new_container(m, pos, {}, NEW_DICT)


def _empty_list(m: Machine, pos: int) -> int:
    return _new_container(m, pos, [], NEW_LIST)


def _empty_set(m: Machine, pos: int) -> int:
    m.push(set(), NEW_SET)
    return pos


def _mark(m: Machine, pos: int) -> int:
    m.fence = fence = len(m.stack)
    m.marks.append(fence)
    m.cost += MARK if fence < 256 else MARK + MARK_INT
    return pos


def _filled(m: Machine, op: int, kind: type, empty: int) -> tuple[Any, list[Any], int]:
    """SETITEMS, APPENDS, ADDITEMS: the container of type `kind` below the innermost mark, the items
    above it (taken off the stack) and the container's size before they go in (`empty`: empty)."""
    marks, stack = m.marks, m.stack
    if not marks:
        raise Refused(f"{OPCODE_NAMES[op]} without a MARK")
    mark = marks.pop()
    m.fence = marks[-1] if marks else 0
    if mark <= m.fence:
        raise Refused("stack underflow")
    target = stack[mark - 1]
    items = stack[mark:]
    del stack[mark:]
    if m.cost + ITEM * len(items) > m.limit:
        raise m.too_big()
    if target.__class__ is not kind:
        raise Refused(f"{OPCODE_NAMES[op]} on a {type(target).__name__}")
    return target, items, sys.getsizeof(target) if target else empty


def _setitems(m: Machine, pos: int) -> int:
    target, items, before = _filled(m, 0x75, dict, EMPTY_DICT)
    if len(items) & 1:
        raise Refused("SETITEMS with an odd number of items")
    keys = items[::2]
    for key in keys:
        if key.__class__ is not str:
            check_key(key)
    target.update(zip(keys, items[1::2]))
    m.cost += sys.getsizeof(target) - before
    return pos


def _appends(m: Machine, pos: int) -> int:
    target, items, before = _filled(m, 0x65, list, EMPTY_LIST)
    target.extend(items)
    m.cost += sys.getsizeof(target) - before
    return pos


def _additems(m: Machine, pos: int) -> int:
    target, items, before = _filled(m, 0x90, set, EMPTY_SET)
    for key in items:
        check_key(key)
    target.update(items)
    m.cost += sys.getsizeof(target) - before
    return pos


def _onto(m: Machine, n: int, kind: type, name: str) -> tuple[Any, list[Any]]:
    """APPEND, SETITEM: the container of type `kind` below the top `n` items, and those items (taken
    off the stack)."""
    m.need(n + 1)
    items = m.stack[-n:]
    del m.stack[-n:]
    target = m.stack[-1]
    if target.__class__ is not kind:
        raise Refused(f"{name} on a {type(target).__name__}")
    return target, items


def _append(m: Machine, pos: int) -> int:
    target, (value,) = _onto(m, 1, list, "APPEND")
    before = sys.getsizeof(target)
    target.append(value)
    m.cost += sys.getsizeof(target) - before
    return pos


def _setitem(m: Machine, pos: int) -> int:
    target, (key, value) = _onto(m, 2, dict, "SETITEM")
    check_key(key)
    before = sys.getsizeof(target)
    target[key] = value
    m.cost += sys.getsizeof(target) - before
    return pos


def _tuple_of(n: int) -> Callable[[Machine, int], int]:
    """The handler of TUPLE1, TUPLE2 or TUPLE3: the top `n` items as a tuple."""

    def handler(m: Machine, pos: int) -> int:
        m.need(n)
        value = tuple(m.stack[-n:])
        del m.stack[-n:]
        m.push(value, TUPLE + 8 * n)
        return pos

    return handler


def _from_mark(make: Callable[[list[Any]], Any], op: int) -> Callable[[Machine, int], int]:
    """The handler of TUPLE, LIST, DICT or FROZENSET: `make` of the items above the innermost mark."""

    def handler(m: Machine, pos: int) -> int:
        value = make(m.items_above(m.pop_mark(op)))
        m.push(value, sys.getsizeof(value) + PUSH)
        return pos

    return handler


def _as_dict(items: list[Any]) -> dict[Any, Any]:
    if len(items) & 1:
        raise Refused("DICT with an odd number of items")
    keys = items[::2]
    for key in keys:
        check_key(key)
    return dict(zip(keys, items[1::2], strict=True))


def _as_frozenset(items: list[Any]) -> frozenset[Any]:
    for key in items:
        check_key(key)
    return frozenset(items)


# ---------------------------------------------------------------- the stack and the frame


def _pop_mark(m: Machine, pos: int) -> int:
    m.items_above(m.pop_mark(0x31))
    return pos


def _pop(m: Machine, pos: int) -> int:
    """POP: an item, or a mark with nothing above it."""
    if m.marks and m.marks[-1] == len(m.stack):
        m.marks.pop()
        m.fence = m.marks[-1] if m.marks else 0
    else:
        m.need(1)
        m.stack.pop()
    return pos


def _dup(m: Machine, pos: int) -> int:
    m.need(1)
    m.push(m.stack[-1], PUSH)
    return pos


def _frame(m: Machine, pos: int) -> int:
    """FRAME: a hint for reading, checked, then ignored."""
    m.length(pos + 8, _U64(m.data, pos)[0])
    return pos + 8


def _proto(m: Machine, pos: int) -> int:
    if m.data[pos] > 5:
        raise Refused(f"pickle protocol {m.data[pos]}, newer than 5")
    return pos + 1


def _stop(m: Machine, pos: int) -> int:
    m.need(1)
    m.result = m.stack[-1]
    return _STOPPED


# ---------------------------------------------------------------- refused


def _global(m: Machine, pos: int) -> int:
    """GLOBAL: module and name on two lines, refused by name."""
    data = m.data
    module_end = data.find(b"\n", pos)
    name_end = data.find(b"\n", module_end + 1) if module_end >= 0 else -1
    module = data[pos:module_end].decode("utf-8", "replace") if module_end >= 0 else "?"
    name = data[module_end + 1 : name_end].decode("utf-8", "replace") if name_end >= 0 else "?"
    raise Refused(f"refused global {_shown(module)}.{_shown(name)}: a snapshot holds only plain data")


def _stack_global(m: Machine, pos: int) -> int:
    """STACK_GLOBAL: module and name from the stack, refused by name."""
    module, name = (m.stack[-2], m.stack[-1]) if len(m.stack) >= 2 else ("?", "?")
    raise Refused(f"refused global {_shown(module)}.{_shown(name)}: a snapshot holds only plain data")


def _refusal(op: int) -> Refused:
    if op in OPCODE_NAMES:
        return Refused(f"refused opcode {OPCODE_NAMES[op]}: a snapshot holds only plain data")
    return Refused(f"unknown opcode 0x{op:02x}")


#: Opcode → its handler. An opcode not here is refused.
_HANDLERS: dict[int, Callable[[Machine, int], int]] = {
    0x6A: _get,  # LONG_BINGET
    0x68: _get,  # BINGET
    0x94: _memoize,
    0x71: _binput,
    0x72: _long_binput,
    0x28: _mark,
    0x4E: _pushes(None),
    0x88: _pushes(True),
    0x89: _pushes(False),
    0x4B: _binint1,
    0x4D: _binint2,
    0x4A: _binint,
    0x47: _binfloat,
    0x8A: _long1,
    0x8B: _long4,
    0x8C: _short_binunicode,
    0x58: _binunicode,
    0x8D: _binunicode8,
    0x43: _bytes_of(_as_bytes, _length1, 1),  # SHORT_BINBYTES
    0x42: _bytes_of(_as_bytes, _length4, 4),  # BINBYTES
    0x8E: _bytes_of(_as_bytes, _length8, 8),  # BINBYTES8
    0x96: _bytes_of(_as_bytearray, _length8, 8),  # BYTEARRAY8
    0x55: _bytes_of(_as_ascii, _length1, 1),  # SHORT_BINSTRING
    0x54: _bytes_of(_as_ascii, _binstring_length, 4),  # BINSTRING
    0x7D: _empty_dict,
    0x5D: _empty_list,
    0x8F: _empty_set,
    0x29: _pushes(()),
    0x75: _setitems,
    0x65: _appends,
    0x90: _additems,
    0x61: _append,
    0x73: _setitem,
    0x85: _tuple_of(1),
    0x86: _tuple_of(2),
    0x87: _tuple_of(3),
    0x74: _from_mark(tuple, 0x74),  # TUPLE
    0x6C: _from_mark(list, 0x6C),  # LIST
    0x64: _from_mark(_as_dict, 0x64),  # DICT
    0x91: _from_mark(_as_frozenset, 0x91),  # FROZENSET
    0x31: _pop_mark,
    0x30: _pop,
    0x32: _dup,
    0x95: _frame,
    0x80: _proto,
    0x2E: _stop,
    0x63: _global,
    0x93: _stack_global,
}


def _refuse(m: Machine, pos: int) -> int:
    """Every opcode `_HANDLERS` has no handler for."""
    raise _refusal(m.data[pos - 1])


#: `_HANDLERS` by opcode, for the loop.
_BY_OPCODE = [_HANDLERS.get(op, _refuse) for op in range(256)]


def unpickle(data: bytes, limit: int, limit_is: str = "") -> Any:
    """The plain data pickled in `data` (protocol 2 to 5), or `Refused` with one line; `limit`: the
    bytes it may take, which `limit_is` says in words for the message ("32 times the file's size")."""
    m = Machine(data, limit, limit_is)
    handlers = _BY_OPCODE
    pos = 0
    try:
        while pos >= 0:  # until STOP gives _STOPPED
            if m.cost > limit:
                raise m.too_big()
            pos = handlers[data[pos]](m, pos + 1)
        return m.result
    except (IndexError, struct.error):  # past the end of the data
        raise Refused("pickle data was truncated") from None
    except (Refused, MemoryError):
        raise
    except Exception as exc:  # a string that is not UTF-8, an unhashable key...
        text = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise Refused(f"{type(exc).__name__}: {text}" if text else type(exc).__name__) from None
