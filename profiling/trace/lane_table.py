"""A trace's lanes: `Lane`, one horizontal track (a CPU thread, or one stream of one GPU), and
`LaneTable`, the reader's lanes as columns, a `Lane` made only when asked for one.

A trace can hold a million lanes (a thread per event): making a million `Lane` objects at load
would take seconds and hundreds of MB, so the reader keeps columns and the analyses read them
(`Trace.lane_kind_codes`, `Trace.lane_indices`).
"""

from __future__ import annotations

import gc
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

LaneKind = Literal["cpu", "gpu"]
#: What a lane's thread does: the main thread, an inter-op pool thread, an intra-op (OpenMP) worker,
#: an autograd engine thread, any other thread. GPU lanes are always "stream".
LaneRole = Literal["main", "interop", "intra", "autograd", "other", "stream"]

ROLE_ORDER: tuple[LaneRole, ...] = ("main", "interop", "intra", "autograd", "other", "stream")
#: Lane kinds by their code in `LaneTable.kind` and `Trace.lane_kind_codes`.
KIND_ORDER: tuple[LaneKind, ...] = ("cpu", "gpu")



@dataclass(frozen=True, slots=True)
class Lane:
    """One horizontal track: a CPU thread, or one stream of one GPU."""

    index: int
    kind: LaneKind
    pid: int
    #: OS thread id for CPU lanes (as written in the trace, possibly negative); stream id for GPU lanes.
    tid: int
    name: str
    role: LaneRole
    #: GPU device index for GPU lanes; -1 for CPU lanes.
    device: int = -1
    #: The distributed rank this lane belongs to, when several ranks' traces are merged.
    rank: int | None = None

    @property
    def label(self) -> str:
        text = f"GPU {self.device} stream {self.tid}" if self.kind == "gpu" else (self.name or f"thread {self.tid}")
        return text if self.rank is None else f"rank {self.rank} · {text}"


#: Lane's slots, set directly: making a million lanes through the frozen dataclass's __init__ (one
#: object.__setattr__ call per field) takes 1.6 s, through the slots' own setters 0.6 s.
_SET_INDEX, _SET_KIND, _SET_PID, _SET_TID, _SET_NAME, _SET_ROLE, _SET_DEVICE, _SET_RANK = (
    Lane.__dict__[name].__set__ for name in ("index", "kind", "pid", "tid", "name", "role", "device", "rank")
)
assert Lane.__slots__ == ("index", "kind", "pid", "tid", "name", "role", "device", "rank")


def _new_lane(
    index: int, kind: LaneKind, pid: int, tid: int, name: str, role: LaneRole, device: int, rank: int | None
) -> Lane:
    """`Lane(index, kind, pid, tid, name, role, device, rank)`, made without its __init__."""
    lane = object.__new__(Lane)
    _SET_INDEX(lane, index)
    _SET_KIND(lane, kind)
    _SET_PID(lane, pid)
    _SET_TID(lane, tid)
    _SET_NAME(lane, name)
    _SET_ROLE(lane, role)
    _SET_DEVICE(lane, device)
    _SET_RANK(lane, rank)
    return lane


#: The name of a lane whose thread has none, by kind code.
_DEFAULT_NAME = ("thread {}", "stream {}")


class LaneTable(Sequence[Lane]):
    """The lanes of a loaded trace as columns, a `Lane` made on first use of it.

    A trace of a million threads would spend seconds and hundreds of MB on Lane objects at load;
    the analyses read the columns instead (`Trace.lane_kind_codes`, `Trace.lane_indices`). A lane
    once made stays the same object. Compares equal to a list of the same lanes.

    Columns: `kind` (int8 code into `KIND_ORDER`), `pid`, `tid`, `device` (int64, or object
    arrays of Python ints where some do not fit int64), `role` (int8 code into `ROLE_ORDER`);
    `names` holds the names that are not the default ("thread TID" for a CPU lane, "stream TID"
    for a GPU lane). Every lane's index is its position and its rank None.
    """

    __slots__ = ("kind", "pid", "tid", "role", "device", "names", "_made", "_all_made")

    def __init__(
        self,
        *,
        kind: np.ndarray,
        pid: np.ndarray,
        tid: np.ndarray,
        role: np.ndarray,
        device: np.ndarray,
        names: dict[int, str] | None = None,
    ) -> None:
        self.kind = np.asarray(kind, dtype=np.int8)
        self.pid, self.tid, self.device = pid, tid, device
        self.role = np.asarray(role, dtype=np.int8)
        self.names = names or {}
        self._made: list[Lane | None] | None = None
        self._all_made = False

    def __len__(self) -> int:
        return int(self.kind.size)

    @overload
    def __getitem__(self, i: int) -> Lane: ...

    @overload
    def __getitem__(self, i: slice) -> list[Lane]: ...

    def __getitem__(self, i: int | slice) -> Lane | list[Lane]:
        if isinstance(i, slice):
            return self._all()[i]
        n = len(self)
        k = operator.index(i)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("lane index out of range")
        made = self._made
        if made is None:
            made = self._made = [None] * n
        lane = made[k]
        if lane is None:
            lane = made[k] = self._make(np.array([k], dtype=np.int64))[0]
        return lane

    def __iter__(self) -> Iterator[Lane]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (LaneTable, list)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # like a list

    def __repr__(self) -> str:
        return repr(self._all())

    def _all(self) -> list[Lane]:
        """Every lane, the ones not yet made made now, in one pass."""
        made = self._made
        if not self._all_made:
            if made is None:
                made = self._made = list(self._make(np.arange(len(self), dtype=np.int64)))
            else:
                missing = [k for k, lane in enumerate(made) if lane is None]
                for k, lane in zip(missing, self._make(np.array(missing, dtype=np.int64))):
                    made[k] = lane
            self._all_made = True
        return made  # type: ignore[return-value]  # no None left

    def _make(self, index: np.ndarray) -> list[Lane]:
        kind = self.kind[index].tolist()
        tid = self.tid[index].tolist()
        name = list(map(str.format, map(_DEFAULT_NAME.__getitem__, kind), tid))
        if self.names and index.size <= len(self.names):  # one lane, a few: look each up
            for j, k in enumerate(index.tolist()):
                if (own_name := self.names.get(k)) is not None:
                    name[j] = own_name
        elif self.names:  # most lanes: go through the names once (`index` is ascending)
            own = np.array(list(self.names), dtype=np.int64)
            at = np.minimum(np.searchsorted(index, own), max(index.size - 1, 0))
            for k, j in zip(own.tolist(), at.tolist()):
                if index.size and index[j] == k:
                    name[j] = self.names[k]
        # A million new objects would set off as many needless passes of the cyclic collector.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return list(
                map(
                    _new_lane,
                    index.tolist(),
                    map(KIND_ORDER.__getitem__, kind),
                    self.pid[index].tolist(),
                    tid,
                    name,
                    map(ROLE_ORDER.__getitem__, self.role[index].tolist()),
                    self.device[index].tolist(),
                    itertools.repeat(None),
                )
            )
        finally:
            if gc_was_enabled:
                gc.enable()


def _int_column(values: list[int]) -> np.ndarray:
    """Python ints as int64, or as an object array where some do not fit int64."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array(values, dtype=object)
