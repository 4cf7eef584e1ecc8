"""Allocator snapshots built here: curves, sites from frames, ranks, and hostile or broken pickles."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from branchscope.profiling import TraceFormatError
from branchscope.profiling.trace.memory import BEFORE_PROFILING, analyze_memory
from branchscope.profiling.trace.merge import merge_traces
from branchscope.profiling.trace.snapshot import is_snapshot, load_snapshot, site_of
from tests.builders.snapshots import LOSS, TORCH, Payload, frame, two_gpu_snapshot, write


def test_two_gpu_snapshot_json(tmp_path: Path) -> None:
    trace = load_snapshot(write(tmp_path / "snapshot.pickle", two_gpu_snapshot()))
    assert len(trace) == 0 and [m.device for m in trace.memory] == ["cuda:0", "cuda:1"]
    cuda0 = trace.memory[0]
    # Absolute totals: the 512 B held from before recording are counted from the start.
    assert cuda0.total_bytes.tolist() == [512 + 1024, 512 + 1024 + 4096, 512 + 1024, 512]
    assert cuda0.reserved_bytes is not None and cuda0.reserved_bytes.tolist() == [1 << 20] * 4
    doc = analyze_memory(trace).to_json(top=5)
    assert doc == {
        "main": {"device": "cuda:0", "rank": None},
        "source": None,  # the allocator's own record, not a stand-in (`memory_source.recorded_by`)
        "why_none": None,
        "devices": [
            {
                "device": "cuda:0", "rank": None, "peak_bytes": 5632, "peak_ts_us": 3.0,
                "reserved_peak_bytes": 1 << 20, "capacity_bytes": None, "allocations": 2, "frees": 2, "freed_unseen": 0,
                "at_peak": [
                    {"where": "/home/u/train.py:41:loss", "bytes": 4096, "allocations": 1},
                    {"where": "/home/u/model.py:12:forward", "bytes": 1024, "allocations": 1},
                    {"where": BEFORE_PROFILING, "bytes": 512, "allocations": 0},
                ],
            },
            {
                "device": "cuda:1", "rank": None, "peak_bytes": 1024, "peak_ts_us": 2.0,
                "reserved_peak_bytes": 2 << 20, "capacity_bytes": None, "allocations": 1, "frees": 1, "freed_unseen": 0,
                "at_peak": [{"where": "/home/u/model.py:12:forward", "bytes": 1024, "allocations": 1}],
            },
        ],
        "imbalance": [
            # two devices: the heaviest against the lightest (5.5×), not against their mean (1.69×)
            {"device_type": "cuda", "heaviest": "cuda:0", "max_over_median": 5632 / 3328, "excess_bytes": 4608,
             "ratio": 5632 / 1024, "ratio_of": "max/min", "lightest": "cuda:1"}
        ],
    }


def test_site_is_innermost_frame_outside_torch() -> None:
    assert site_of(LOSS) == "/home/u/train.py:41:loss"
    assert site_of([frame(TORCH, 5, "g")]) == f"{TORCH}:5:g"  # all torch: the innermost
    assert site_of([]) == "(no op)" and site_of(None) == "(no op)"


def test_snapshot_ranks_from_names_merge(tmp_path: Path) -> None:
    a = load_snapshot(write(tmp_path / "rank-0.pickle", two_gpu_snapshot()))
    b = load_snapshot(write(tmp_path / "snap_rank1.pickle", two_gpu_snapshot()))
    assert (a.rank, b.rank) == (0, 1)
    analysis = analyze_memory(merge_traces([a, b]))
    assert [(d.device, d.rank) for d in analysis.devices] == [
        ("rank0/cuda:0", 0), ("rank0/cuda:1", 0), ("rank1/cuda:0", 1), ("rank1/cuda:1", 1)
    ]
    assert analysis.imbalance[0].heaviest == "rank0/cuda:0"


def test_snapshot_without_times_uses_positions(tmp_path: Path) -> None:
    snap = two_gpu_snapshot()
    for e in snap["device_traces"][1]:
        del e["time_us"]
    trace = load_snapshot(write(tmp_path / "s.pickle", snap))
    assert trace.memory[1].ts_ns.tolist() == [0, 1000]


def test_pickle_that_runs_code_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write(tmp_path / "evil.pickle", {"segments": [], "device_traces": [[Payload(marker)]]})
    assert b"system" in path.read_bytes()
    with pytest.raises(TraceFormatError, match="refused global") as info:
        load_snapshot(path)
    assert "\n" not in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": "x"}]]}),
         "malformed snapshot"),
        (pickle.dumps({"hello": 1}), "not a memory snapshot"),
        (pickle.dumps(3), "not a memory snapshot"),
        (pickle.dumps({"device_traces": [[1, 2]]}), "not a list of objects"),
        (pickle.dumps(two_gpu_snapshot())[:200], "not a memory snapshot"),
        (pickle.dumps({1, 2}), "not a memory snapshot"),
    ],
)
def test_broken_snapshots_are_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError, match=message) as info:
        load_snapshot(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_pickles_told_by_magic(tmp_path: Path) -> None:
    assert is_snapshot(write(tmp_path / "any-name.json", two_gpu_snapshot()))
    (tmp_path / "t.json").write_text("{}")
    assert not is_snapshot(tmp_path / "t.json") and not is_snapshot(tmp_path / "missing")


def test_a_fifo_is_not_taken_for_a_snapshot_and_never_opened(tmp_path: Path) -> None:
    import os

    from branchscope.profiling.trace.snapshot import is_snapshot

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert not is_snapshot(fifo)  # opening it would block: no writer
    assert not is_snapshot(tmp_path)
