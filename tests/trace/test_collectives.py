"""Collectives matched across ranks (`profiling/trace/collectives.py`): by Seq and process group, by
name and place otherwise; each rank's wait for the last arrival, the skew, the stragglers; inspect's
"collectives"; the details panel's waits."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from branchscope.app import cmd_inspect
from branchscope.profiling import load_trace, merge_traces
from branchscope.profiling.trace.collectives import COLLECTIVE_NAME, collectives_json, match_collectives
from branchscope.profiling.trace.merge import as_ranks
from branchscope.profiling.trace.model import Lane, Trace, build_trace
from branchscope.widgets.event_info import link_rows

US = 1000

#: (lane: 0 CPU, 1 GPU; name; start µs; duration µs; args)
Event = tuple[int, str, int, int, dict[str, Any]]


def rank_trace(rank: int, events: list[Event]) -> Trace:
    """One rank's trace: a CPU thread and a GPU stream, events with their args."""
    names = sorted({e[1] for e in events})
    lanes = [Lane(0, "cpu", 10 + rank, 1, "main", "main"), Lane(1, "gpu", 10 + rank, 7, "stream 7", "stream", device=rank)]
    return build_trace(
        path=f"rank-{rank}", start_ns=np.array([e[2] * US for e in events], dtype=np.int64),
        dur_ns=np.array([e[3] * US for e in events], dtype=np.int64), lane=np.array([e[0] for e in events]),
        name_id=np.array([names.index(e[1]) for e in events]), cat_id=np.zeros(len(events)), names=names,
        cats=["cpu_op"], lanes=lanes, metadata={"distributedInfo": {"rank": rank, "world_size": 4}},
        raw_args=[e[4] for e in events],
    )  # fmt: skip


def job(per_rank: list[list[Event]]) -> Trace:
    return merge_traces(as_ranks([rank_trace(r, evs) for r, evs in enumerate(per_rank)]))


def rpc(seq: int, group: str = "0", coll: str = "allreduce", size: int = 1024) -> dict[str, Any]:
    """`record_param_comms`'s args as PyTorch ≥ 2.1 writes them."""
    return {"Collective name": coll, "Seq": seq, "Process Group Name": group, "In msg nelems": size}


def by_members(trace: Trace, c, k: int) -> dict[int, int]:
    """{rank: arrival µs} of collective k."""
    sl = c.members(k)
    return {int(r): int(trace.start_ns[e]) // US for r, e in zip(c.rank[sl], c.event[sl])}


def test_waits_skew_and_stragglers_are_exact():
    arrivals = [[100, 500, 900], [130, 505, 950], [110, 560, 950]]  # µs: rank r's arrival at collective 0, 1, 2
    trace = job([[(0, "record_param_comms", a, 40, rpc(s)) for s, a in enumerate(rank)] for rank in arrivals])
    c = match_collectives(trace)
    assert len(c) == 3 and c.rank_count.tolist() == [3, 3, 3]
    assert c.seq.tolist() == [0, 1, 2] and c.name == ["record_param_comms"] * 3 and c.group == ["0"] * 3
    assert c.collective == ["allreduce"] * 3
    assert c.skew_ns.tolist() == [30 * US, 60 * US, 50 * US]
    assert c.last_rank.tolist() == [1, 2, 1]  # a tie: the lower rank
    assert c.waits(0) == {0: 30 * US, 1: 0, 2: 20 * US}
    assert c.waits(1) == {0: 60 * US, 1: 55 * US, 2: 0}
    assert c.waits(2) == {0: 50 * US, 1: 0, 2: 0}
    assert c.ranks.tolist() == [0, 1, 2]
    assert c.rank_wait_ns.tolist() == [140 * US, 55 * US, 20 * US]
    assert c.rank_times_last.tolist() == [0, 2, 1]
    assert c.size.tolist() == [1024] * 3 and not c.size_mismatch.any()


def test_seq_and_process_group_match_where_order_does_not():
    # rank 1 calls group "1"'s collective first; each group counts its own Seq from 0
    r0 = [(0, "record_param_comms", 100, 10, rpc(0, "0")), (0, "record_param_comms", 200, 10, rpc(0, "1")),
          (0, "record_param_comms", 300, 10, rpc(1, "0"))]  # fmt: skip
    r1 = [(0, "record_param_comms", 150, 10, rpc(0, "1")), (0, "record_param_comms", 250, 10, rpc(0, "0")),
          (0, "record_param_comms", 320, 10, rpc(1, "0"))]  # fmt: skip
    trace = job([r0, r1])
    c = match_collectives(trace)
    found = {(c.group[k], int(c.seq[k])): by_members(trace, c, k) for k in range(len(c))}
    assert found == {("0", 0): {0: 100, 1: 250}, ("1", 0): {0: 200, 1: 150}, ("0", 1): {0: 300, 1: 320}}
    assert (c.position == -1).all()
    doc = collectives_json(trace)
    assert doc is not None and doc["matched_by_seq"] == 3 and doc["matched_by_position"] == 0
    assert doc["worst"][0]["group"] == "0" and doc["worst"][0]["seq"] == 0 and doc["worst"][0]["skew_us"] == 150.0
    assert doc["worst"][0]["last_rank"] == 1 and doc["worst"][0]["first_rank"] == 0


def test_without_seq_collectives_match_by_name_and_place():
    r0 = [(0, "nccl:all_reduce", 100, 10, {}), (0, "nccl:all_to_all", 200, 10, {}), (0, "nccl:all_reduce", 300, 10, {})]
    r1 = [(0, "nccl:all_to_all", 120, 10, {}), (0, "nccl:all_reduce", 240, 10, {}), (0, "nccl:all_reduce", 330, 10, {})]
    trace = job([r0, r1])
    c = match_collectives(trace)
    found = {(c.name[k], int(c.position[k])): by_members(trace, c, k) for k in range(len(c))}
    assert c.collective == ["", "", ""]
    assert found == {
        ("nccl:all_reduce", 0): {0: 100, 1: 240},
        ("nccl:all_to_all", 0): {0: 200, 1: 120},
        ("nccl:all_reduce", 1): {0: 300, 1: 330},
    }
    assert (c.seq == -1).all()
    assert c.rank_wait_ns.tolist() == [(140 + 0 + 30) * US, (0 + 80 + 0) * US]
    assert c.rank_times_last.tolist() == [1, 2]
    doc = collectives_json(trace)
    assert doc is not None and doc["matched_by_position"] == 3 and doc["matched_by_seq"] == 0


def test_without_seq_the_message_size_tells_collectives_apart():
    def reduce(t: int, n: int) -> list[Event]:  # the c10d op around the annotation takes its size
        return [(0, "c10d::allreduce_", t, 20, {}), (0, "nccl:all_reduce", t + 1, 10, {"Input Dims": [[n]]})]

    def to_all(t: int, n: int) -> list[Event]:  # all-to-all sizes differ by rank: not a key
        return [(0, "nccl:all_to_all", t, 10, {"Input Dims": [[n]]})]

    # rank 1's trace lost its first all-reduce (a sampled trace, a window that starts late)
    r0 = reduce(100, 300) + reduce(200, 500) + reduce(300, 700) + to_all(400, 7) + to_all(500, 8)
    r1 = reduce(210, 500) + reduce(320, 700) + to_all(410, 9) + to_all(530, 6)
    trace = job([r0, r1])
    c = match_collectives(trace)
    found = {(c.name[k], int(c.size[k]), int(c.position[k])): by_members(trace, c, k) for k in range(len(c))}
    assert found == {
        ("c10d::allreduce_", 300, 0): {0: 100},
        ("nccl:all_reduce", 300, 0): {0: 101},
        ("c10d::allreduce_", 500, 0): {0: 200, 1: 210},
        ("nccl:all_reduce", 500, 0): {0: 201, 1: 211},
        ("c10d::allreduce_", 700, 0): {0: 300, 1: 320},
        ("nccl:all_reduce", 700, 0): {0: 301, 1: 321},
        ("nccl:all_to_all", 9, 0): {0: 400, 1: 410},
        ("nccl:all_to_all", 8, 1): {0: 500, 1: 530},
    }
    assert not c.size_mismatch.any()
    doc = collectives_json(trace)
    assert doc is not None and doc["level"] == "c10d" and doc["count"] == 2 and doc["unmatched"] == 1
    assert [(w["size_elems"], w["position"], w["position_by_size"]) for w in doc["worst"]] == [(700, 0, True), (500, 0, True)]
    text = "\n".join(cmd_inspect.collectives_lines(doc))
    assert "  c10d::allreduce_ #1 of 700 elements\n" in text


def test_a_rank_missing_a_collective_leaves_the_others_matched():
    ranks = [[(0, "record_param_comms", 100 * s + r, 10, rpc(s)) for s in range(3) if not (r == 2 and s == 1)] for r in range(3)]
    trace = job(ranks)
    c = match_collectives(trace)
    assert c.seq.tolist() == [0, 1, 2] and c.rank_count.tolist() == [3, 2, 3]
    assert c.rank[c.members(1)].tolist() == [0, 1]
    assert c.waits(1) == {0: 1 * US, 1: 0}
    doc = collectives_json(trace)
    assert doc is not None and doc["count"] == 3 and doc["incomplete"] == 1 and doc["unmatched"] == 0


def test_a_collective_on_one_rank_only_is_unmatched():
    trace = job([[(0, "record_param_comms", 100, 10, rpc(0)), (0, "record_param_comms", 200, 10, rpc(1))],
                 [(0, "record_param_comms", 105, 10, rpc(0))]])  # fmt: skip
    doc = collectives_json(trace)
    assert doc is not None and doc["count"] == 1 and doc["unmatched"] == 1
    assert doc["ranks"] == [{"rank": 0, "wait_us": 5.0, "times_last": 0}, {"rank": 1, "wait_us": 0.0, "times_last": 1}]


def test_nested_levels_match_each_and_the_totals_count_the_c10d_level():
    def rank(r: int, t: int) -> list[Event]:
        return [
            (0, "c10d::allreduce_", t, 50, {}),
            (0, "record_param_comms", t + 1, 40, rpc(3)),
            (0, "nccl:all_reduce", t + 2, 30, {}),
            (1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", t + 60, 20, rpc(3)),
        ]

    trace = job([rank(0, 100), rank(1, 170)])
    c = match_collectives(trace)
    assert len(c) == 4 and (c.rank_count == 2).all() and (c.skew_ns == 70 * US).all()
    # the Seq of record_param_comms goes to the collectives around it and inside it
    assert c.seq.tolist() == [3, 3, 3, 3] and c.collective == ["allreduce"] * 4
    assert c.counted.sum() == 1 and c.name[int(np.flatnonzero(c.counted)[0])] == "c10d::allreduce_"
    assert c.outer.sum() == 2 and c.on_gpu.sum() == 1  # the kernel is outermost on its GPU lane
    assert sorted(c.level.tolist()) == [0, 1, 2, 3]
    assert c.rank_wait_ns.tolist() == [70 * US, 0]  # once, not once per level
    # every level finds its peers: the selected kernel's details say each rank's wait
    kernel_1 = int(c.event[c.members(int(np.flatnonzero(c.on_gpu)[0]))][1])
    rows = dict(link_rows(trace, kernel_1))
    assert rows["Waits"] == "rank 0 waited 70 µs; rank 1 arrived last (skew 70 µs)"


def test_gpu_only_traces_count_their_kernels():
    kernel = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    trace = job([[(1, kernel, 100, 10, {}), (1, kernel, 300, 10, {})], [(1, kernel, 90, 10, {}), (1, kernel, 310, 10, {})]])
    c = match_collectives(trace)
    assert c.counted.all() and c.on_gpu.all()
    assert c.rank_wait_ns.tolist() == [10 * US, 10 * US] and c.rank_times_last.tolist() == [1, 1]
    doc = collectives_json(trace)
    assert doc is not None and doc["level"] == "kernel"


def test_message_sizes_that_differ_are_flagged_but_not_for_all_to_all():
    def rank(sizes: tuple[int, int, int]) -> list[Event]:
        colls = ("allreduce", "all_to_all", "_allgather_base")
        return [(0, "record_param_comms", 100 * (s + 1), 10, rpc(s, coll=colls[s], size=n)) for s, n in enumerate(sizes)]

    c = match_collectives(job([rank((10, 5, 4)), rank((12, 9, 3))]))
    assert c.rank_count.tolist() == [2, 2, 2]  # one collective each, whatever the sizes
    assert c.size_mismatch.tolist() == [True, False, True] and c.size.tolist() == [12, 9, 4]


def test_one_rank_has_no_collectives_to_match():
    trace = rank_trace(0, [(0, "record_param_comms", 100, 10, rpc(0))])
    assert len(match_collectives(trace)) == 0 and collectives_json(trace) is None


def test_the_real_two_rank_trace_matches_its_collectives_by_name_size_and_place(shared_traces):
    """hta_two_ranks is sampled (events filtered out): no Seq, and the ranks' all-reduces in start
    order are 19,618,307 / 26,955,536 / 26,258,430 / 5,716,654 elements (rank 0) and 19,618,307 /
    26,258,430 / 19,618,307 / 5,716,654 (rank 1): by size and place three pair up, one of each rank's
    is left alone (at each level: c10d op, record_param_comms, nccl: annotation); every other
    collective pairs up on both ranks by name and place."""
    folder = shared_traces / "hta_two_ranks"
    trace = merge_traces(as_ranks([load_trace(folder / f"rank-{r}.json.gz") for r in (0, 1)]))
    per_rank = {0: 0, 1: 0}
    for i in range(len(trace)):
        if COLLECTIVE_NAME.match(trace.event_name(i)):
            per_rank[trace.lanes[int(trace.lane[i])].rank] += 1
    assert per_rank[0] == per_rank[1] == 38
    c = match_collectives(trace)
    assert (c.seq == -1).all() and len(set(c.event.tolist())) == 76  # every event in one collective
    reduce = ("c10d::allreduce_", "record_param_comms", "nccl:all_reduce")  # the levels of an all-reduce
    for k in range(len(c)):
        names = {trace.event_name(int(e)) for e in c.event[c.members(k)]}
        assert names == {c.name[k]}
    alone = {(c.name[k], int(c.size[k]), int(c.rank[c.offsets[k]])) for k in np.flatnonzero(c.rank_count == 1)}
    assert alone == {(n, s, r) for n in reduce for s, r in ((26_955_536, 0), (19_618_307, 1))}
    assert (c.rank_count == 2).sum() == len(c) - 6
    # the c10d op takes the size of the nccl: annotation inside (record_param_comms too, which also
    # stands for the all-to-alls here)
    for name in ("c10d::allreduce_", "nccl:all_reduce"):
        pairs = {int(c.size[k]) for k in np.flatnonzero(c.rank_count == 2) if c.name[k] == name}
        assert pairs == {19_618_307, 26_258_430, 5_716_654}
    first = next(k for k in range(len(c)) if c.name[k] == "c10d::allreduce_" and c.size[k] == 19_618_307 and c.position[k] == 0)
    assert c.skew_ns[first] == 56_000 and c.last_rank[first] == 0 and c.waits(first) == {0: 0, 1: 56_000}
    doc = collectives_json(trace)
    assert doc is not None and doc["level"] == "c10d" and doc["matched_by_position"] == doc["count"] == 9
    assert doc["unmatched"] == 2 and sum(r["times_last"] for r in doc["ranks"]) == 9
    assert doc["worst"][0]["skew_us"] == max(w["skew_us"] for w in doc["worst"]) > 0


def _write_rank(path: Path, rank: int, arrivals: list[int]) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 10 + rank, "tid": 1, "ts": a,
               "dur": 5, "args": rpc(s)} for s, a in enumerate(arrivals)]  # fmt: skip
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}))
    return path


def _inspect(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="branchscope")
    cmd_inspect.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_inspect_reports_collectives_of_a_job(tmp_path, capsys):
    a = _write_rank(tmp_path / "rank-0.json", 0, [100, 200, 300])
    b = _write_rank(tmp_path / "rank-1.json", 1, [104, 250, 301])
    assert _inspect(["inspect", "--json", str(a), str(b)]) == 0
    doc = json.loads(capsys.readouterr().out)["collectives"]
    assert doc["count"] == 3 and doc["matched_by_seq"] == 3 and doc["level"] == "record_param_comms"
    assert [(w["seq"], w["skew_us"], w["last_rank"]) for w in doc["worst"]] == [(1, 50.0, 1), (0, 4.0, 1), (2, 1.0, 1)]
    assert doc["ranks"] == [{"rank": 0, "wait_us": 55.0, "times_last": 0}, {"rank": 1, "wait_us": 0.0, "times_last": 3}]
    assert _inspect(["inspect", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "collectives: 3 on 2 ranks (3 by Seq, 0 by name, size and place; counted: record_param_comms)" in text
    worst = text.index("(allreduce) Seq 1 of group 0")  # the worst first
    assert "0.050     1     0  record_param_comms (allreduce) Seq 1 of group 0" in text
    assert worst < text.index("(allreduce) Seq 0 of group 0")
    assert "     0      0.055      0\n" in text and "     1      0.000      3\n" in text
    assert _inspect(["inspect", "--json", str(a)]) == 0
    assert json.loads(capsys.readouterr().out)["collectives"] is None
    assert _inspect(["inspect", str(a)]) == 0
    assert "collectives:" not in capsys.readouterr().out


@pytest.mark.parametrize("bad", [{"Seq": "7"}, {"Seq": 1.5, "Process Group Name": ["x"]}, "not args", None])
def test_odd_args_fall_back_to_place(bad):
    trace = job([[(0, "record_param_comms", 100, 10, bad), (0, "record_param_comms", 200, 10, bad)],
                 [(0, "record_param_comms", 110, 10, bad), (0, "record_param_comms", 230, 10, bad)]])  # fmt: skip
    c = match_collectives(trace)
    assert c.position.tolist() == [0, 1] and c.skew_ns.tolist() == [10 * US, 30 * US]


def test_the_details_of_a_collective_on_many_ranks_stay_short():
    trace = job([[(0, "record_param_comms", 100 + 3 * r, 10, rpc(0))] for r in range(12)])
    c = match_collectives(trace)
    assert c.rank_count.tolist() == [12] and c.last_rank.tolist() == [11]
    rows = dict(link_rows(trace, int(c.event[0])))
    assert rows["Collective"].endswith("rank 7 +21 µs, … 4 more")
    assert rows["Waits"] == (
        "rank 0 waited 33 µs, rank 1 waited 30 µs, rank 2 waited 27 µs, rank 3 waited 24 µs, "
        "rank 4 waited 21 µs, rank 5 waited 18 µs, rank 6 waited 15 µs, rank 7 waited 12 µs, "
        "… and 3 more ranks; rank 11 arrived last (skew 33 µs)"
    )


def test_inspect_lists_the_stragglers_first_when_ranks_are_many():
    # 20 ranks, two collectives: rank 13 last in both, rank 4 last in none but waiting least of the rest
    def arrival(r: int, s: int) -> int:
        return 1000 * s + (500 if r == 13 else (400 if r == 4 else r))

    trace = job([[(0, "record_param_comms", arrival(r, s), 10, rpc(s)) for s in range(2)] for r in range(20)])
    doc = collectives_json(trace)
    assert doc is not None and len(doc["ranks"]) == 20
    lines = cmd_inspect.collectives_lines(doc)
    table = lines[lines.index(f"  {'rank':>4} {'wait ms':>10} {'last':>6}") + 1 :]
    assert len(table) == 17 and table[-1] == "  … 4 more ranks (all in --json)"
    assert table[0] == f"  {13:>4} {0:>10.3f} {2:>6}" and table[1].split()[0] == "4"


@pytest.mark.parametrize("high", [10, 1 << 40])  # mixed radix, and past 2**62 the distinct rows' ids
def test_dense_keys_order_rows_as_the_columns_do(high):
    from branchscope.profiling.trace.collectives import _dense

    rng = np.random.default_rng(7)
    cols = (rng.integers(0, 3, 500), rng.integers(0, high, 500), rng.integers(0, high, 500))
    key = _dense(cols)
    order = np.lexsort(cols[::-1])
    rows = np.stack(cols, axis=1)[order]
    assert (np.diff(key[order]) >= 0).all()  # sorted by the columns is sorted by the key
    same = (rows[1:] == rows[:-1]).all(axis=1)
    assert ((np.diff(key[order]) == 0) == same).all()  # equal keys exactly where rows are equal


def test_places_count_across_a_ranks_threads_by_start():
    # gloo runs its collectives on threads of its own: one name on two lanes of a rank, interleaved
    r0 = [(1, "gloo:all_reduce", 100, 10, {}), (0, "gloo:all_reduce", 200, 10, {}), (1, "gloo:all_reduce", 300, 10, {})]
    r1 = [(0, "gloo:all_reduce", 110, 10, {}), (1, "gloo:all_reduce", 210, 10, {}), (0, "gloo:all_reduce", 310, 10, {})]
    trace = job([r0, r1])
    c = match_collectives(trace)
    assert [by_members(trace, c, k) for k in range(len(c))] == [{0: 100, 1: 110}, {0: 200, 1: 210}, {0: 300, 1: 310}]
    assert c.position.tolist() == [0, 1, 2]
