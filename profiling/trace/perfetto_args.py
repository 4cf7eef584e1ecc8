"""A Perfetto event's debug annotations as its JSON `args`, read when asked for, never at load.

`PerfettoArgs` is a trace's `_raw_args` for a Perfetto trace: item i is the JSON text
`{"args": {...}}` of event i's annotations (those of its begin, then its end's), made on demand from
the event's bytes (kept in the file's buffer), as a JSON trace keeps each event's text. Values:
bool, int, uint, double, string (or interned string) as JSON scalars, a pointer as "0x..." text,
`legacy_json_value` as the JSON it holds, nested values, dict entries and array values as objects
and lists. An annotation's name is its `name` or its interned `name_iid`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import numpy as np

from branchscope.profiling.trace.decode import _Interner
from branchscope.profiling.trace.perfetto_schema import parse, text
from branchscope.profiling.trace.perfetto_state import interned_ids
from branchscope.profiling.trace.perfetto_wire import LEN, VARINT, Want, scan

_JSON = msgspec.json.Decoder()
_NO_ARGS = b'{"args":{}}'


class PerfettoArgs(Sequence[Any]):
    """Per event, the JSON text of its args, made when asked for (one shared text where it has none:
    every item is bytes, as the rank pool's `trace_parts` sends them)."""

    def __init__(
        self, data: bytes, spans: np.ndarray, gen: np.ndarray, interned: dict[tuple[str, int, int], str]
    ) -> None:
        #: per event: (begin start, begin end, end start, end end) of its TrackEvents' bytes; -1: none
        self._data = data
        self._spans = spans
        self._gen = gen
        self._interned = interned

    def __len__(self) -> int:
        return int(self._gen.size)

    def reordered(self, order: np.ndarray) -> PerfettoArgs:
        """The same args in the order `order` (what `build_trace` sorts events by)."""
        return PerfettoArgs(self._data, self._spans[order], self._gen[order], self._interned)

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
            args[self._name(a, gen)] = self._value(a, gen)

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
    events = scan(buf, start, end, (Want(_ANNOTATIONS, LEN, True),))
    msg, off, ln = events.items[_ANNOTATIONS]
    a = scan(buf, off.astype(np.int64), off.astype(np.int64) + ln, _ANNOTATION_FIELDS)
    is_int = a.has[_INT] | a.has[_UINT] | a.has[_BOOL]
    value = np.where(a.has[_INT], a.value[_INT], np.where(a.has[_UINT], a.value[_UINT], a.value[_BOOL])).view(np.int64)
    table = _Interner()
    names = np.zeros(msg.size, np.int32)
    inline = np.flatnonzero(a.has[_NAME])
    data = buf.data
    off, ln = a.value[_NAME][inline].astype(np.int64), a.length[_NAME][inline]
    names[inline] = table.ids([text(bytes(data[o : o + n])) for o, n in zip(off.tolist(), ln.tolist())])
    by_iid = np.flatnonzero(~a.has[_NAME])
    names[by_iid] = interned_ids(table, interned, "ann", gen[msg[by_iid]], a.value[_NAME_IID][by_iid])
    ints = np.flatnonzero(is_int)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    texts = list(table.table)
    for k in np.unique(names[ints]).tolist():
        at = ints[names[ints] == k]
        out[texts[k]] = (msg[at], value[at])
    return out


_ANNOTATIONS = 4
