"""The memory engine on traces built here (known allocations) and on the public 2-stream trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from branchscope.profiling import load_trace
from branchscope.profiling.trace.memory import BEFORE_PROFILING, NO_OP, analyze_memory
from branchscope.profiling.trace.merge import merge_traces
from tests.builders.memory import FOUR_GPU_PROPERTIES, four_gpu_events, mem, op, write_trace
from tests.builders.public_traces import public_trace_path


def test_reused_address_pairs_each_allocation_with_its_own_free(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        mem(10, 100, 100, addr=0xA0),
        mem(20, -100, 0, addr=0xA0),
        mem(30, 300, 300, addr=0xA0),  # the allocator hands the same block out again
        mem(40, 50, 350, addr=0xB0),
        mem(50, -300, 50, addr=0xA0),
        mem(60, -50, 0, addr=0xB0),
    ]))
    got = [(a.addr, a.bytes, a.alloc_ns, a.free_ns) for a in analyze_memory(trace).allocations("cuda:0")]
    assert got == [
        (0xA0, 100, 10_000, 20_000),
        (0xA0, 300, 30_000, 50_000),
        (0xB0, 50, 40_000, 60_000),
    ]


def test_free_before_profiling_and_never_freed(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        op("step", 1, 0, 100),
        mem(10, -64, 1000, addr=0xC0),  # allocated before profiling began
        mem(20, 32, 1032, addr=0xD0),  # outlives the profile
    ]))
    analysis = analyze_memory(trace)
    (before, kept) = analysis.allocations("cuda:0")
    assert (before.alloc_ns, before.free_ns, before.bytes, before.where, before.event) == (
        None, 10_000, 64, BEFORE_PROFILING, -1
    )
    assert (kept.alloc_ns, kept.free_ns, kept.bytes, kept.where) == (20_000, None, 32, "step")
    assert kept.lifetime_ns is None and before.lifetime_ns is None
    (device,) = analysis.devices
    assert (device.allocations, device.frees, device.peak_bytes) == (1, 1, 1032)
    # At the peak the 32 B are live; the other 1000 B were allocated before profiling and held.
    assert [(a.where, a.bytes, a.allocations) for a in device.at_peak] == [
        (BEFORE_PROFILING, 1000, 0), ("step", 32, 1)
    ]


def test_allocation_attributed_to_innermost_op_on_its_own_thread(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        op("outer", 1, 0, 100),
        op("inner", 1, 10, 40),
        op("other thread's op", 2, 0, 100),
        op("other thread's inner", 2, 15, 10),
        mem(20, 8, 8, addr=1, tid=1),  # inside inner (and, by time, inside thread 2's inner op)
        mem(60, 8, 16, addr=2, tid=1),  # inner ended: outer
        mem(20, 8, 24, addr=3, tid=2),
        mem(30, 8, 32, addr=4, tid=2),  # thread 2's inner ended at 25
        mem(200, 8, 40, addr=5, tid=1),  # after every op
        mem(50, 8, 48, addr=6, tid=7),  # a thread without ops
    ]))
    allocations = {a.addr: a for a in analyze_memory(trace).allocations("cuda:0")}
    where = {addr: a.where for addr, a in allocations.items()}
    assert where == {
        1: "inner", 2: "outer", 3: "other thread's inner", 4: "other thread's op", 5: NO_OP, 6: NO_OP
    }
    for a in allocations.values():
        if a.event >= 0:
            event = trace.event(a.event)
            assert event.name == a.where and event.start_ns <= a.alloc_ns <= event.end_ns
        else:
            assert a.where == NO_OP


def test_live_at_and_in_range(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        mem(10, 100, 100, addr=1),
        mem(20, 200, 300, addr=2),
        mem(30, -100, 200, addr=1),
        mem(40, -200, 0, addr=2),
        mem(50, 50, 50, addr=3),
    ]))
    analysis = analyze_memory(trace)
    assert [a.addr for a in analysis.live_at("cuda:0", 25_000)] == [1, 2]
    assert [a.addr for a in analysis.live_at("cuda:0", 30_000)] == [2]  # freed at 30: not live
    assert [a.addr for a in analysis.in_range("cuda:0", 31_000, 45_000)] == [2]
    assert [a.addr for a in analysis.in_range("cuda:0", 45_000, 60_000)] == [3]
    assert [a.addr for a in analysis.live_at_peak("cuda:0")] == [1, 2]
    assert analysis.allocations("cuda:7") == [] and analysis.live_at("cuda:7", 0) == []


def test_four_gpu_json(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", four_gpu_events(), deviceProperties=FOUR_GPU_PROPERTIES))
    doc = analyze_memory(trace).to_json(top=10)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["devices"][0] == {
        "device": "cuda:0",
        "rank": None,
        "peak_bytes": 600,
        "peak_ts_us": 75.0,
        "reserved_peak_bytes": 2048,
        "capacity_bytes": 1 << 30,
        "allocations": 3,
        "frees": 3,
        "freed_unseen": 0,
        "at_peak": [
            {"where": "aten::cat", "bytes": 400, "allocations": 1},
            {"where": "forward", "bytes": 100, "allocations": 1},
            {"where": "loss", "bytes": 100, "allocations": 1},
        ],
    }
    for d in (1, 2, 3):
        assert doc["devices"][d] == {
            "device": f"cuda:{d}", "rank": None, "peak_bytes": 100, "peak_ts_us": 10.0 + d,
            "reserved_peak_bytes": 1024, "capacity_bytes": (d + 1) << 30, "allocations": 1, "frees": 1,
            "freed_unseen": 0, "at_peak": [{"where": "forward", "bytes": 100, "allocations": 1}],
        }
    assert doc["imbalance"] == [
        {"device_type": "cuda", "heaviest": "cuda:0", "max_over_median": 6.0, "excess_bytes": 500,
         "ratio": 6.0, "ratio_of": "max/median", "lightest": "cuda:1"}
    ]
    assert doc["main"] == {"device": "cuda:0", "rank": None}
    assert analyze_memory(trace).to_json(top=1)["devices"][0]["at_peak"] == [
        {"where": "aten::cat", "bytes": 400, "allocations": 1}
    ]


def test_ranks_merged_name_devices_and_imbalance(tmp_path: Path) -> None:
    def rank(r: int, nbytes: int) -> Path:
        events = [op("step", 1, 0, 100), mem(10, nbytes, nbytes, addr=1, device=r)]
        return write_trace(tmp_path / f"rank-{r}.json", events,
                           distributedInfo={"rank": r, "world_size": 3, "backend": "nccl"})

    merged = merge_traces([load_trace(rank(r, b)) for r, b in ((0, 100), (1, 300), (2, 200))])
    analysis = analyze_memory(merged)
    assert [(d.device, d.rank, d.peak_bytes) for d in analysis.devices] == [
        ("rank0/cuda:0", 0, 100), ("rank1/cuda:1", 1, 300), ("rank2/cuda:2", 2, 200)
    ]
    # Each rank's allocation is attributed to its own rank's op.
    assert [a.where for a in analysis.allocations("rank1/cuda:1")] == ["step"]
    (imb,) = analysis.imbalance
    assert (imb.heaviest, imb.max_over_median, imb.excess_bytes) == ("rank1/cuda:1", 1.5, 100)


def test_two_ranks_with_equal_peaks_name_two_ranks(tmp_path: Path) -> None:
    def rank(r: int) -> Path:
        events = [op("step", 1, 0, 100), mem(10, 100, 100, addr=1, device=0)]
        return write_trace(tmp_path / f"rank-{r}.json", events,
                           distributedInfo={"rank": r, "world_size": 2, "backend": "gloo"})

    (imb,) = analyze_memory(merge_traces([load_trace(rank(r)) for r in (0, 1)])).imbalance
    assert (imb.heaviest_rank, imb.lightest_rank, imb.ratio) == (0, 1, 1.0)  # not "rank 0 holds 1.0× rank 0"
    assert imb.words(str).startswith("rank 0 holds 1.0× rank 1 ")


def test_cpu_alone_has_no_imbalance_and_cpu_is_its_own_kind(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        mem(10, 8, 8, addr=1, device=-1, device_type=0),
        mem(11, 80, 80, addr=1, device=0),
    ]))
    analysis = analyze_memory(trace)
    assert [d.device for d in analysis.devices] == ["cpu", "cuda:0"]
    assert analysis.imbalance == []
    assert analysis.devices[0].reserved_peak_bytes is None and analysis.devices[0].capacity_bytes is None


def test_trace_without_addresses_is_not_paired(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", [
        mem(10, 100, 100, addr=None), mem(20, 50, 150, addr=None), mem(30, -100, 50, addr=None)
    ]))
    analysis = analyze_memory(trace)
    (device,) = analysis.devices
    assert (device.allocations, device.frees, device.peak_bytes, device.at_peak) == (2, 1, 150, ())
    assert analysis.allocations("cuda:0") == []
    assert analysis.to_json()["devices"][0]["at_peak"] == []


def test_public_trace_peak_and_what_holds_it(shared_traces: Path) -> None:
    trace = load_trace(public_trace_path(shared_traces, "hta_gpu_memory_2streams.json.gz"))
    analysis = analyze_memory(trace)
    cuda = analysis.device("cuda:1")
    assert cuda is not None
    assert cuda.peak_bytes == 6_629_508_096
    assert cuda.capacity_bytes == 34_089_730_048 and cuda.reserved_peak_bytes == 12_782_141_440
    assert cuda.allocations == cuda.frees == 13_385
    # What is live at the peak, plus what was held from before profiling, is the peak.
    assert sum(a.bytes for a in cuda.at_peak) == cuda.peak_bytes
    sizes = [a.bytes for a in cuda.at_peak]
    assert sizes == sorted(sizes, reverse=True)
    live = analysis.live_at_peak("cuda:1")
    ops = {a.where: 0 for a in live}
    for a in live:
        ops[a.where] += a.bytes
    assert {a.where: a.bytes for a in cuda.at_peak if a.where != BEFORE_PROFILING} == ops
    assert all(a.where == trace.event_name(a.event) for a in live if a.event >= 0)
    assert [ln.tid for ln in trace.lanes if ln.kind == "cpu"]  # allocations come from real threads


@given(
    st.lists(
        st.tuples(st.integers(-(1 << 40), 1 << 40), st.integers(-(1 << 40), 1 << 40)) | st.tuples(st.integers(-3, 20), st.integers(-1, 8)),
        min_size=1,
        max_size=40,
    )
)
def test_device_pairs_are_the_distinct_rows_in_order(rows):
    from branchscope.profiling.trace.reader import _device_pairs

    t, i = (np.array(c, dtype=np.int64) for c in zip(*rows))
    pairs, which = _device_pairs(t, i)
    want, want_which = np.unique(np.stack([t, i], axis=1), axis=0, return_inverse=True)
    assert np.array_equal(pairs, want) and np.array_equal(which, want_which.reshape(-1))
