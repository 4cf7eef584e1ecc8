"""The columns of complete events are declared once (`decode.COLUMNS`): every declared column, and
its table of values, comes through the forked child's pipe and the merge of two halves exactly as
one range of events decodes it, a column added to the table included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from branchscope.profiling.trace import decode
from branchscope.profiling.trace.decode import COLUMNS, _Column, _decode_range, _merge_parts, _Part

CHUNK = 16
#: Metadata events first, then units of 5 events, as many in each half.
_LEAD, _UNITS = 4, 60


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_CHUNK", CHUNK)


def _events() -> list[bytes]:
    """Complete events of every shape the columns take (packed threads, threads kept as written:
    string ids, "stream N", ids past 32 bits; decimal and string times, no duration, a pseudo
    process), with the other kinds between them. The second half (from `_mid`) holds names,
    categories and threads the first lacks, and meets those they share in another order, so that
    its ids differ from the merged ones."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": f"thread {tid}"}} for tid in range(_LEAD)
    ]
    for k in range(2 * _UNITS):
        late = k >= _UNITS
        tid: Any = [1, 2, "stream 7", "x", 1 << 40][k % 5] if not late else ["y", "x", 3, "stream 9", "stream 7"][k % 5]
        events += [
            {"ph": "X", "name": f"{'late' if late and k % 2 else 'op'}{k % 7}", "cat": ["cpu_op", "kernel"][k % 2]
             if not late else ["gpu_memcpy", "cpu_op", "kernel"][k % 3], "pid": 1 if k % 4 else "12", "tid": tid,
             "ts": f"{1_712_195_495_519_000 + 10 * k}.{k:03d}", **({"dur": k % 3} if k % 6 else {})},
            {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 * k,
             "args": {"Device Type": 1, "Device Id": 0, "Bytes": 64, "Total Allocated": 64 * k, "Addr": k}},
            {"ph": "C", "name": "queue", "pid": 1, "tid": 0, "ts": 10 * k, "args": {"depth": k}},
            {"ph": "s" if k % 2 else "f", "id": k // 2, "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": 1, "ts": 10 * k},
            {"ph": "X", "name": "span", "pid": "Spans", "tid": "x", "ts": str(10 * k), "dur": 1},
        ]  # fmt: skip
    return [json.dumps(e).encode() for e in events]


def _mid(raws: list[bytes]) -> int:
    """Where the second half starts: its first event, on a chunk's edge (threads are packed or not
    chunk by chunk, so that halves cut elsewhere would not decode as one range does)."""
    mid = _LEAD + 5 * _UNITS
    assert mid % CHUNK == 0 and len(raws) == _LEAD + 10 * _UNITS
    return mid


def _through_pipe(part: _Part, tmp_path: Path) -> _Part:
    """The part as this process reads it back from the forked child (`write_to`, `read_from`)."""
    path = tmp_path / "part"
    with open(path, "wb") as f:
        part.write_to(f)
    with open(path, "rb") as f:
        back = _Part.read_from(f)
        assert f.read() == b""
    return back


#: Columns a new feature might add: one of values, one of ids into a table of its own.
EXTRA = (
    _Column("name_length", np.dtype(np.int64), lambda ch, _: np.array(list(map(len, ch.values("name"))), np.int64)),
    _Column("tid_as_written", np.dtype(np.int32), lambda ch, t: t.ids(list(map(str, ch.values("tid")))), table=list[str]),
)


@pytest.fixture(params=["declared", "with_new_columns"])
def columns(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[_Column, ...]:
    if request.param == "with_new_columns":
        monkeypatch.setattr(decode, "COLUMNS", (*COLUMNS, *EXTRA))
    return decode.COLUMNS


def _assert_same_part(a: _Part, b: _Part) -> None:
    assert a.tables == b.tables
    for group in ("columns", "memory", "at"):
        x, y = getattr(a, group), getattr(b, group)
        assert list(x) == list(y), group
        for name in x:
            assert x[name].dtype == y[name].dtype and np.array_equal(x[name], y[name]), (group, name)


def test_every_column_comes_through_the_pipe(columns: tuple[_Column, ...], tmp_path: Path) -> None:
    raws = _events()
    part = _decode_range(raws, 0, len(raws), lambda _f: None)
    assert list(part.columns) == [c.name for c in columns]
    assert list(part.tables) == [c.name for c in columns if c.table is not None]
    for c in columns:
        assert part.columns[c.name].dtype == c.dtype, c.name
        assert part.columns[c.name].size == part.columns["index"].size > 0, c.name
    _assert_same_part(_through_pipe(part, tmp_path), part)


def test_two_halves_merge_into_what_one_range_decodes(columns: tuple[_Column, ...], tmp_path: Path) -> None:
    raws = _events()
    mid = _mid(raws)
    first = _decode_range(raws, 0, mid, lambda _f: None)
    second = _through_pipe(_decode_range(raws, mid, len(raws), lambda _f: None), tmp_path)
    # The halves' own ids differ from the merged ones, for every column of ids.
    for c in columns:
        if c.table is not None:
            assert first.tables[c.name] != second.tables[c.name][: len(first.tables[c.name])], c.name
    tables, merged = _merge_parts([first, second])
    whole_tables, whole = _merge_parts([_decode_range(raws, 0, len(raws), lambda _f: None)])
    assert {k: list(v.items()) for k, v in tables.items()} == {k: list(v.items()) for k, v in whole_tables.items()}
    assert list(merged) == list(whole) == [c.name for c in columns]
    for c in columns:
        assert merged[c.name].dtype == whole[c.name].dtype == c.dtype, c.name
        assert np.array_equal(merged[c.name], whole[c.name]), c.name
