"""Comparing runs without Qt: the op diff (counts, total and self time, what is an op, the steps
window, the order), run summaries, baselines and speedups, and grouping traces into ranks of one job."""

from __future__ import annotations

import json
import statistics

import msgspec
import numpy as np
import pytest

from branchscope.profiling import TraceFormatError, load_trace
from branchscope.profiling.trace.compare import (
    LoadedRun,
    compare,
    default_baseline,
    load_run,
    op_diff,
    op_totals,
    run_label,
    summarize,
    unique_labels,
)
from branchscope.profiling.trace.merge import merge_traces, rank_groups
from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.profiling.trace.records import RunRecord, encode_record
from tests.builders.runs import write_small_trace

# ---- synthetic traces ----------------------------------------------------------------------------


def _trace(events, metadata=None, path="synthetic.json"):
    """events: (tid, name, cat, start_ns, dur_ns); one CPU lane per tid."""
    tids = sorted({e[0] for e in events})
    lanes = [
        Lane(k, "cpu", 1, tid, f"thread {tid}", "main" if k == 0 else "other") for k, tid in enumerate(tids)
    ]
    names = list(dict.fromkeys(e[1] for e in events))
    cats = list(dict.fromkeys(e[2] for e in events))
    return build_trace(
        path=path,
        start_ns=np.array([e[3] for e in events], dtype=np.int64),
        dur_ns=np.array([e[4] for e in events], dtype=np.int64),
        lane=np.array([tids.index(e[0]) for e in events], dtype=np.int32),
        name_id=np.array([names.index(e[1]) for e in events], dtype=np.int32),
        cat_id=np.array([cats.index(e[2]) for e in events], dtype=np.int32),
        names=names,
        cats=cats,
        lanes=lanes,
        metadata=metadata or {},
    )


def _by_name(totals):
    return {
        n: (int(c), int(t), int(s))
        for n, c, t, s in zip(totals.names, totals.count, totals.total_ns, totals.self_ns)
        if c
    }


def test_self_time_is_duration_less_the_nearest_ops_inside_through_annotations():
    t = _trace([
        (1, "step 1", "user_annotation", 0, 1000),
        (1, "aten::linear", "cpu_op", 100, 600),
        (1, "branch: left", "user_annotation", 110, 500),
        (1, "aten::mm", "cpu_op", 120, 400),
        (1, "aten::resolve_conj", "cpu_op", 130, 10),
        (1, "aten::add", "cpu_op", 800, 50),
        (2, "aten::mm", "cpu_op", 100, 300),
    ])  # fmt: skip
    got = _by_name(op_totals(t))
    assert got == {
        "aten::linear": (1, 600, 200),  # 600 less the mm inside the branch annotation
        "aten::mm": (2, 700, 390 + 300),
        "aten::resolve_conj": (1, 10, 10),
        "aten::add": (1, 50, 50),
    }


def test_a_child_that_outlasts_its_parent_takes_only_the_parents_time():
    t = _trace([(1, "aten::linear", "cpu_op", 0, 100), (1, "aten::mm", "cpu_op", 50, 100)])
    got = _by_name(op_totals(t))
    # A child sticking out (rounded times) is cut at its parent's end: self time never goes negative.
    assert got["aten::linear"][2] == 50


def test_annotations_frames_and_python_functions_are_not_ops():
    t = _trace([
        (1, "step 1", "user_annotation", 0, 1000),
        (1, "ProfilerStep#3", "cpu_op", 0, 1000),
        (1, "forward", "cpu_op", 10, 900),
        (1, "<forked function>", "cpu_op", 20, 800),
        (1, "__enter__", "cpu_op", 25, 5),
        (1, "branch: a -> b", "user_annotation", 30, 700),
        (1, "nn.Module: Linear_0", "python_function", 40, 600),
        (1, "aten::mm", "cpu_op", 50, 500),
        (1, "cudaLaunchKernel", "cuda_runtime", 600, 5),
        (1, "detach", "cpu_op", 700, 5),
        (1, "Optimizer.step#SGD.step", "Operator", 710, 50),
        (1, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "Operator", 800, 50),
        (1, "aten::add", "Operator", 810, 5),
    ])  # fmt: skip
    assert set(_by_name(op_totals(t))) == {"aten::mm", "cudaLaunchKernel", "detach", "aten::add"}
    assert _by_name(op_totals(t))["aten::mm"] == (1, 500, 500)


def test_only_ops_starting_inside_the_window_count():
    t = _trace([(1, "aten::mm", "cpu_op", s, 10) for s in (0, 100, 200, 300)])
    assert _by_name(op_totals(t, (100, 300)))["aten::mm"] == (2, 20, 20)


def test_op_diff_lists_every_op_of_any_run_largest_difference_first():
    a = _trace(
        [
            (1, "aten::mm", "cpu_op", 0, 100),
            (1, "aten::add", "cpu_op", 200, 50),
            (1, "aten::t", "cpu_op", 300, 5),
        ]
    )
    b = _trace(
        [
            (1, "aten::mm", "cpu_op", 0, 400),
            (1, "aten::add", "cpu_op", 500, 60),
            (1, "aten::relu", "cpu_op", 600, 90),
        ]
    )
    ops = op_diff([a, b], [None, None])
    assert [op.name for op in ops] == ["aten::mm", "aten::relu", "aten::add", "aten::t"]
    spreads = [op.spread_us for op in ops]
    assert spreads == sorted(spreads, reverse=True)
    relu = ops[1]
    assert (relu.count, relu.total_us, relu.self_us) == ([0, 1], [0.0, 0.09], [0.0, 0.09])


def test_op_diff_counts_inside_each_runs_profiled_steps():
    def run(offset):
        return _trace([
            (1, "aten::mm", "cpu_op", offset, 10),  # warm-up, before the steps
            (1, "step 1", "user_annotation", offset + 100, 100),
            (1, "aten::mm", "cpu_op", offset + 110, 20),
            (1, "step 2", "user_annotation", offset + 200, 100),
            (1, "aten::mm", "cpu_op", offset + 210, 30),
        ])  # fmt: skip

    (mm,) = op_diff([run(0), run(10_000)])
    assert mm.count == [2, 2] and mm.total_us == [0.05, 0.05]


# ---- summaries, labels, baselines ----------------------------------------------------------------


def _run_json(mode, interop, intra, steps, **more) -> RunRecord:
    return RunRecord(mode=mode, interop=interop, intra=intra, model="demo m", median_ms=9.5,
                     unprofiled_steps_ms=steps, trace="trace.json.gz", complete=True, **more)  # fmt: skip


def test_labels_come_from_run_json_then_the_traces_run_info_then_the_file_name(tmp_path):
    small = load_trace(write_small_trace(tmp_path / "small.json", "fork"))
    plain = _trace([(1, "aten::mm", "cpu_op", 0, 10)], path=str(tmp_path / "plain.json"))
    assert run_label(small, _run_json("sequential", 1, 1, []), "x") == "demo m · sequential · 1×1"
    assert run_label(small, None, str(tmp_path / "small.json")) == "small.json · fork · 2×1"
    assert run_label(plain, None, str(tmp_path / "plain.json")) == "plain.json"
    assert unique_labels(["a", "b", "a", "a"]) == ["a", "b", "a (2)", "a (3)"]


def test_a_summary_holds_the_run_and_the_traces_numbers(tmp_path):
    small = load_trace(write_small_trace(tmp_path / "small.json", "fork"))
    s = summarize(small, _run_json("fork", 2, 1, [3.0, 1.0, 2.0, 10.0]), "the/path")
    assert (s.label, s.path, s.mode, s.interop, s.intra, s.threads) == (
        "demo m · fork · 2×1",
        "the/path",
        "fork",
        2,
        1,
        "2×1",
    )
    assert s.median_ms == 9.5
    assert s.unprofiled is not None and s.unprofiled.median == statistics.median([3.0, 1.0, 2.0, 10.0])
    assert s.peak_bytes == {"cpu": max(m.peak_bytes for m in small.memory)}
    # Shown from its first profiled step: the small trace's first "step" annotation.
    first_step = int(small.start_ns[small.name_id == small.names.index("step 0")].min())
    assert s.origin_ns == first_step
    assert s.parallelism is not None and s.parallelism > 1.0  # two forked branches at once


def test_the_baseline_is_the_sequential_1x1_run_else_the_first(tmp_path):
    small = load_trace(write_small_trace(tmp_path / "small.json", "fork"))
    fork = summarize(small, _run_json("fork", 2, 1, [5.0, 5.0, 5.0]))
    seq = summarize(small, _run_json("sequential", 1, 1, [10.0, 10.0, 10.0]))
    seq4 = summarize(small, _run_json("sequential", 1, 4, [8.0]))
    assert default_baseline([fork, seq4, seq]) == 2
    assert default_baseline([fork, seq4]) == 0


def test_speedup_is_the_baseline_median_over_the_runs_and_within_noise_where_iqrs_overlap(tmp_path):
    small = load_trace(write_small_trace(tmp_path / "small.json", "fork"))
    runs = [
        LoadedRun("fork", small, _run_json("fork", 2, 1, [5.0, 5.2, 4.8, 5.1])),
        LoadedRun("seq", small, _run_json("sequential", 1, 1, [10.0, 10.4, 9.8, 10.1])),
        LoadedRun("close", small, _run_json("fork", 2, 2, [10.1, 9.9, 10.3, 10.0])),
        LoadedRun("plain", small, None),
    ]
    c = compare(runs)
    assert c.baseline == 1
    medians = [statistics.median(r.run.unprofiled_steps_ms) for r in runs[:3] if r.run and r.run.unprofiled_steps_ms]
    assert c.speedup[:3] == [pytest.approx(medians[1] / m) for m in medians]
    assert c.speedup[3] is None  # a plain trace has no unprofiled steps
    assert c.within_noise == [False, True, True, None]
    doc = json.loads(json.dumps(c.to_json()))
    assert doc["runs"][3]["unprofiled_median_ms"] is None and doc["runs"][3]["unprofiled_spread_ms"] is None
    with pytest.raises(IndexError):
        compare(runs, baseline=4)


# ---- loading --------------------------------------------------------------------------------------


def test_a_run_folder_reads_the_trace_its_run_json_names(tmp_path):
    write_small_trace(tmp_path / "t.json.gz", "fork")
    (tmp_path / "run.json").write_bytes(encode_record(msgspec.structs.replace(_run_json("fork", 2, 1, [1.0]), trace="t.json.gz")))
    folder = load_run(tmp_path)
    assert folder.run is not None and folder.trace.path.endswith("t.json.gz")
    beside = load_run(tmp_path / "t.json.gz")
    assert beside.run == folder.run
    # A run.json beside a trace it does not name is someone else's.
    write_small_trace(tmp_path / "other.json", "fork")
    assert load_run(tmp_path / "other.json").run is None


@pytest.mark.parametrize("what", ["missing", "empty folder", "bad run.json", "not a trace"])
def test_what_is_not_a_run_raises_a_trace_format_error_naming_it(tmp_path, what):
    path = tmp_path / "x"
    if what == "empty folder":
        path.mkdir()
    elif what == "bad run.json":
        path.mkdir()
        (path / "run.json").write_text("{not json")
    elif what == "not a trace":
        path.write_text("hello")
    with pytest.raises(TraceFormatError, match="x"):
        load_run(path)


# ---- ranks of one job -----------------------------------------------------------------------------


def _rank(rank, world, start_ns, backend="nccl", base=None):
    meta = {"distributedInfo": {"rank": rank, "world_size": world, "backend": backend}}
    if base is not None:
        meta["baseTimeNanoseconds"] = base
    return _trace([(1, "aten::mm", "cpu_op", start_ns, 1000)], meta)


def test_ranks_of_one_job_group_together_and_everything_else_stands_alone():
    traces = [
        _rank(0, 4, 0),
        _rank(1, 4, 500),  # same job, overlapping
        _rank(1, 4, 600),  # rank 1 again: another job
        _rank(2, 8, 200),  # another world size
        _rank(3, 4, 10_000),  # the clock does not overlap
        _trace([(1, "aten::mm", "cpu_op", 0, 1000)]),  # no distributedInfo
        _rank(2, 4, 900, backend="gloo"),  # another backend
        _rank(3, 4, 100),  # joins the first job
    ]
    assert rank_groups(traces) == [[0, 1, 7], [2], [3], [4], [5], [6]]
    assert rank_groups([]) == []


def test_clocks_relative_to_different_bases_are_compared_after_the_shift():
    # Same instants written relative to bases 1 s apart: they overlap once shifted as merge_traces does.
    a = _rank(0, 2, 1_000_000_000, base=0)
    b = _rank(1, 2, 0, base=1_000_000_000)
    c = _rank(1, 2, 1_000_000_000, base=1_000_000_000)  # one second later
    assert rank_groups([a, b]) == [[0, 1]]
    assert rank_groups([a, c]) == [[0], [1]]


def test_the_real_two_rank_job_is_one_group_the_other_real_traces_their_own(shared_traces):
    paths = [
        shared_traces / "hta_two_ranks" / "rank-0.json.gz",
        shared_traces / "hta_gpu_6streams_rank0.json.gz",  # rank 0 of a 16-rank job
        shared_traces / "hta_two_ranks" / "rank-1.json.gz",
        shared_traces / "hta_gpu_memory_2streams.json.gz",  # rank 1 of a 2-rank job
        shared_traces / "hta_cpu_only.pt.trace.json.gz",  # rank 34 of 300, another day
        shared_traces / "kineto_legacy_resnet50_v100.pt.trace.json.gz",  # no distributedInfo
    ]
    traces = [load_trace(p) for p in paths]
    groups = rank_groups(traces)
    assert groups == [[0, 2], [1], [3], [4], [5]]
    merged = merge_traces([traces[k] for k in groups[0]])
    assert {ln.rank for ln in merged.lanes} == {0, 1}
