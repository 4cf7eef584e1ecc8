"""Lanes: which lane an event is on, what kind of lane it is, and in what order lanes are shown.

One lane per (pid, tid) as numbers: 123 and "123" are the same thread, "stream 7" (the legacy
format of PyTorch <= 1.9) is stream 7, negative (wrapped 32-bit) tids are kept as written, and
events of pseudo processes with string pids ("Spans", "Traces") are on no lane (`decode` leaves
them out). A lane is a GPU stream when an event of it has a GPU category (`GPU_CATEGORIES`: the
current names and the legacy `Kernel`/`Memcpy`/`Memset`), its tid was written "stream N", or its
process is labelled "GPU N" (a `process_labels` metadata event). CPU lanes get a role (main,
inter-op, intra-op, autograd, other: `_role`) from the run's own thread lists or else from the
names of `thread_name` metadata events, and a name (`_best_name`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from branchscope.profiling.trace import kineto
from branchscope.profiling.trace.decode import _decode_args, _split_thread_codes, _WithArgs
from branchscope.profiling.trace.fields import _real_id
from branchscope.profiling.trace.lane_table import ROLE_ORDER, LaneRole, LaneTable, _int_column
from branchscope.profiling.trace.run_info import RunInfo

#: Categories whose events run on a GPU stream (current names and the legacy ones).
GPU_CATEGORIES = frozenset(kineto.GPU_CATEGORY.spellings)
_CPU_LABELS = frozenset(label.upper() for label in kineto.CPU_PROCESS_LABEL.spellings)


def _lane_tid(v: int | str, synthetic: dict[str, int]) -> int:
    if type(v) is int:
        return v
    s = str(v).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    m = kineto.STREAM_TID.match(s)
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
    elif _says(joined, kineto.INTEROP_THREAD):
        return "interop"
    if _says(joined, kineto.AUTOGRAD_THREAD):
        return "autograd"
    if tid == pid or (not pid_has_own_tid and _says(joined, kineto.MAIN_THREAD)):
        return "main"
    return "other"


def _says(names: str, k: kineto.Key) -> bool:
    """Whether a thread's names (joined, lower-case) hold a spelling of `k`."""
    return any(spelling in names for spelling in k.spellings)


#: The word a lane's name is picked by, for a role: its thread's first name that holds it.
_NAME_WORD = {"interop": kineto.INTEROP_THREAD.name, "autograd": kineto.AUTOGRAD_THREAD.name, "main": "main"}


def _best_name(names: list[str], role: str, tid: int) -> str:
    keyword = _NAME_WORD.get(role)
    if keyword:
        for n in names:
            if keyword in n.lower():
                return n
    return names[0] if names else f"thread {tid}"


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
        odd_stream.append(isinstance(raw_tid, str) and kineto.STREAM_TID.match(raw_tid.strip()) is not None)
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
    cpu_label_pids = {p for p, label in process_labels.items() if label.strip().upper() in _CPU_LABELS}
    label_device = {p: int(m.group(1)) for p, label in process_labels.items() if (m := kineto.GPU_PROCESS_LABEL.search(label))}
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


def _read_metadata_events(
    meta_events: list[_WithArgs],
) -> tuple[dict[int, str], dict[tuple[int, int], list[str]]]:
    process_labels: dict[int, str] = {}
    thread_names: dict[tuple[int, int], list[str]] = {}
    labels_of, name_of = kineto.PROCESS_LABELS_ARG.getter(), kineto.THREAD_NAME_ARG.getter()
    for e, args in zip(meta_events, _decode_args(meta_events)):
        if not isinstance(args, dict):
            continue
        pid = _real_id(e.pid)
        if pid is None:
            continue
        if e.name in _PROCESS_LABELS and isinstance(labels := labels_of(args), str):
            process_labels[pid] = labels
        elif e.name in _THREAD_NAME and isinstance(name := name_of(args), str):
            tid = _real_id(e.tid)
            if tid is not None:
                names = thread_names.setdefault((pid, tid), [])
                if name not in names:
                    names.append(name)
    return process_labels, thread_names


_PROCESS_LABELS = frozenset(kineto.PROCESS_LABELS.spellings)
_THREAD_NAME = frozenset(kineto.THREAD_NAME.spellings)
