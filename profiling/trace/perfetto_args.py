"""A Perfetto event's debug annotations as its JSON `args`, read when asked for, never at load.

`PerfettoArgs` is a trace's `_raw_args` for a Perfetto trace: item i is the JSON text
`{"args": {...}}` of event i's annotations (those of its begin, then its end's), made on demand from
the event's bytes (kept in the file's buffer), as a JSON trace keeps each event's text. Values:
bool, int, uint, double, string (or interned string) as JSON scalars, a pointer as "0x..." text,
`legacy_json_value` as the JSON it holds, nested values, dict entries and array values as objects
and lists. An annotation's name is its `name` or its interned `name_iid`. Annotations the reader
takes as its own (`hidden`: the exporter's flow categories) are no args.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace.decode import _Interner
from branchscope.profiling.trace.perfetto_schema import parse, text
from branchscope.profiling.trace.perfetto_state import interned_ids
from branchscope.profiling.trace.perfetto_wire import LEN, VARINT, Scanned, Want, scan

_JSON = msgspec.json.Decoder()
_NO_ARGS = b'{"args":{}}'


class PerfettoArgs(Sequence[Any]):
    """Per event, the JSON text of its args, made when asked for (one shared text where it has none:
    every item is bytes, as the rank pool's `trace_parts` sends them)."""

    def __init__(
        self,
        data: bytes,
        spans: np.ndarray,
        gen: np.ndarray,
        interned: dict[tuple[str, int, int], str],
        hidden: frozenset[str] = frozenset(),
    ) -> None:
        #: per event: (begin start, begin end, end start, end end) of its TrackEvents' bytes; -1: none
        self._data = data
        self._spans = spans
        self._gen = gen
        self._interned = interned
        #: the names of annotations read as something else than args (left out of them)
        self._hidden = hidden

    def __len__(self) -> int:
        return int(self._gen.size)

    def reordered(self, order: np.ndarray) -> PerfettoArgs:
        """The same args in the order `order` (what `build_trace` sorts events by)."""
        return PerfettoArgs(self._data, self._spans[order], self._gen[order], self._interned, self._hidden)

    def __iter__(self) -> Iterator[Any]:
        return map(self.__getitem__, range(len(self)))

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        a, b, c, d = self._spans[i].tolist()
        args: dict[str, Any] = {}
        for lo, hi in ((a, b), (c, d)):
            if lo >= 0:
                self._read(self._data[lo:hi], int(self._gen[i]), args)
        return msgspec.json.encode({"args": args}) if args else _NO_ARGS

    def _read(self, raw: bytes, gen: int, args: dict[str, Any]) -> None:
        try:
            annotations = parse("TrackEvent", raw).debug_annotations
        except ValueError:
            return
        for a in annotations:
            name = self._name(a, gen)
            if name not in self._hidden:
                args[name] = self._value(a, gen)

    def _name(self, a: Any, gen: int) -> str:
        if a.HasField("name"):
            return text(a.name)
        return self._interned.get(("ann", gen, a.name_iid), f"iid{a.name_iid}")

    def _value(self, a: Any, gen: int) -> Any:
        if a.dict_entries:
            return {self._name(e, gen): self._value(e, gen) for e in a.dict_entries}
        if a.array_values:
            return [self._value(e, gen) for e in a.array_values]
        for field in _SCALARS:
            if a.HasField(field):
                return _scalar(a, field, self._interned, gen)
        return None


#: The value fields of a DebugAnnotation, in the order read (a valid one sets at most one).
_SCALARS = (
    "bool_value", "int_value", "uint_value", "double_value", "string_value", "string_value_iid",
    "pointer_value", "legacy_json_value", "nested_value",
)  # fmt: skip


def _scalar(a: Any, field: str, interned: dict[tuple[str, int, int], str], gen: int) -> Any:
    value = getattr(a, field)
    if field == "string_value":
        return text(value)
    if field == "string_value_iid":
        return interned.get(("str", gen, value), "")
    if field == "pointer_value":
        return hex(value)
    if field == "legacy_json_value":
        try:
            return _JSON.decode(value)
        except msgspec.DecodeError:
            return text(value)
    if field == "nested_value":
        return _nested(value)
    return value


_DICT, _ARRAY = 1, 2


def _nested(v: Any) -> Any:
    """A NestedValue as JSON."""
    if v.nested_type == _DICT:
        return {text(k): _nested(x) for k, x in zip(v.dict_keys, v.dict_values)}
    if v.nested_type == _ARRAY:
        return [_nested(x) for x in v.array_values]
    for field in ("int_value", "double_value", "bool_value"):
        if v.HasField(field):
            return getattr(v, field)
    return text(v.string_value) if v.HasField("string_value") else None


# ---- many events' integer annotations at once (memory events) ------------------------------------

_NAME_IID, _NAME, _BOOL, _UINT, _INT = 1, 10, 2, 3, 4
_ANNOTATION_FIELDS = (Want(_NAME_IID, VARINT), Want(_NAME, LEN), Want(_BOOL, VARINT), Want(_UINT, VARINT), Want(_INT, VARINT))


def int_annotations(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray, gen: np.ndarray, interned: dict[tuple[str, int, int], str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The integer (int, uint, bool) debug annotations of the TrackEvents `buf[start[k]:end[k]]`,
    read in lockstep (`perfetto_wire.scan`), `_EVENTS_AT_A_TIME` events at a time (an event may
    hold many): name -> (event k, value as int64), in event order."""
    found: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for lo in range(0, start.size, _EVENTS_AT_A_TIME):
        hi = lo + _EVENTS_AT_A_TIME
        for name, (at, value) in _int_annotations(buf, start[lo:hi], end[lo:hi], gen[lo:hi], interned).items():
            found.setdefault(name, []).append((at + lo, value))
    out = {}
    for name in list(found):  # one name at a time, its batches freed once joined
        parts = found.pop(name)
        out[name] = (np.concatenate([a for a, _ in parts]), np.concatenate([v for _, v in parts]))
        del parts
    return out


#: Events whose annotations are read at a time (`int_annotations`): what it allocates stays small.
_EVENTS_AT_A_TIME = 4096


def _int_annotations(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray, gen: np.ndarray, interned: dict[tuple[str, int, int], str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    msg, a = _annotations(buf, start, end, _ANNOTATION_FIELDS)
    is_int = a.has[_INT] | a.has[_UINT] | a.has[_BOOL]
    value = np.where(a.has[_INT], a.value[_INT], np.where(a.has[_UINT], a.value[_UINT], a.value[_BOOL])).view(np.int64)
    table = _Interner()
    names = _names(table, buf, a, gen[msg], interned)
    ints = np.flatnonzero(is_int)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    texts = list(table.table)
    for k in np.unique(names[ints]).tolist():
        at = ints[names[ints] == k]
        out[texts[k]] = (msg[at], value[at])
    return out


_ANNOTATIONS = 4


def _annotations(buf: np.ndarray, start: np.ndarray, end: np.ndarray, wants: tuple[Want, ...]) -> tuple[np.ndarray, Scanned]:
    """The debug annotations of the TrackEvents `buf[start[k]:end[k]]`: each one's event k, and
    their fields `wants`."""
    events = scan(buf, start, end, (Want(_ANNOTATIONS, LEN, True),))
    msg, off, ln = events.items[_ANNOTATIONS]
    return msg, scan(buf, off.astype(np.int64), off.astype(np.int64) + ln, wants)


def _names(table: _Interner, buf: np.ndarray, a: Scanned, gen: np.ndarray, interned: dict[tuple[str, int, int], str]) -> np.ndarray:
    """The name of each annotation `a` (of generation `gen`) as an id in `table`: its inline `name`
    (field 10) or its interned `name_iid` (field 1)."""
    names = np.zeros(a.n, np.int32)
    inline = np.flatnonzero(a.has[_NAME])
    names[inline] = table.ids(_texts(buf, a.value[_NAME][inline], a.length[_NAME][inline]))
    by_iid = np.flatnonzero(~a.has[_NAME])
    names[by_iid] = interned_ids(table, interned, "ann", gen[by_iid], a.value[_NAME_IID][by_iid])
    return names


def _texts(buf: np.ndarray, off: np.ndarray, ln: np.ndarray) -> list[str]:
    data = buf.data
    return [text(bytes(data[o : o + n])) for o, n in zip(off.astype(np.int64).tolist(), ln.tolist())]


# ---- the string entries of one dict annotation of many events (the flows' categories) ------------

_ENTRIES, _STRING = 11, 6
_DICT_FIELDS = (Want(_NAME_IID, VARINT), Want(_NAME, LEN), Want(_ENTRIES, LEN, True))
_ENTRY_FIELDS = (Want(_NAME, LEN), Want(_STRING, LEN))


def dict_annotations(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray, gen: np.ndarray, interned: dict[tuple[str, int, int], str], name: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The entries of the dict annotation `name` of the TrackEvents `buf[start[k]:end[k]]` whose
    name is a decimal number (below 10**19) and whose value a string, read in lockstep as
    `int_annotations` reads and by numpy (no Python step per entry): each entry's number (uint64)
    and its value (an id into the texts also returned), in event order."""
    numbers, value_at = [], []
    for lo in range(0, start.size, _EVENTS_AT_A_TIME):
        hi = lo + _EVENTS_AT_A_TIME
        msg, a = _annotations(buf, start[lo:hi], end[lo:hi], _DICT_FIELDS)
        table = _Interner()
        table.ids([name])  # id 0
        named = _names(table, buf, a, gen[lo:hi][msg], interned) == 0
        owner, off, ln = a.items[_ENTRIES]
        keep = named[owner]
        entry = scan(buf, off[keep].astype(np.int64), off[keep].astype(np.int64) + ln[keep], _ENTRY_FIELDS)
        number, is_number = _decimals(buf, entry.value[_NAME], np.where(entry.has[_NAME], entry.length[_NAME], 0))
        ok = np.flatnonzero(is_number & entry.has[_STRING])
        numbers.append(number[ok])
        value_at.append(np.stack([entry.value[_STRING][ok].astype(np.int64), entry.length[_STRING][ok].astype(np.int64)]))
    if not numbers:
        return np.zeros(0, np.uint64), np.zeros(0, np.int32), []
    off, ln = np.concatenate(value_at, axis=1)
    values, texts = _distinct_texts(buf, off, ln)
    return np.concatenate(numbers), values, texts


#: The most digits `_decimals` reads (any 19-digit number fits in a uint64).
_DIGITS = 19


def _decimals(buf: np.ndarray, off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The texts `buf[off[k]:off[k] + ln[k]]` read as decimal numbers: each one's value (uint64)
    and whether it is one (1 to `_DIGITS` ASCII digits)."""
    ln = ln.astype(np.int64)
    ok = (ln >= 1) & (ln <= _DIGITS)
    value = np.zeros(ln.size, np.uint64)
    for j in range(_DIGITS):
        on = ok & (j < ln)
        digit = buf[np.where(on, off.astype(np.int64) + j, 0)].astype(np.int64) - ord("0")
        ok &= ~on | ((digit >= 0) & (digit <= 9))
        value = np.where(on, value * np.uint64(10) + np.maximum(digit, 0).astype(np.uint64), value)
    return value, ok


def _distinct_texts(buf: np.ndarray, off: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The texts `buf[off[k]:off[k] + ln[k]]` (few distinct: categories) as ids into the distinct
    ones, each decoded once (texts longer than `_WIDEST` bytes, rare, one at a time)."""
    width = int(ln.max(initial=0))
    if width > _WIDEST:
        table = _Interner()
        return table.ids(_texts(buf, off, ln)), list(table.table)
    inside = np.arange(width) < ln[:, None]
    rows = np.where(inside, buf[np.where(inside, off[:, None] + np.arange(width), 0)], 0).astype(np.uint8)
    rows = np.hstack([rows, ln[:, None].astype(np.uint8)])  # texts that differ only by trailing NULs apart
    _, first, ids = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return ids.reshape(-1).astype(np.int32), _texts(buf, off[first], ln[first])


#: The longest texts `_distinct_texts` compares as rows of bytes.
_WIDEST = 255
