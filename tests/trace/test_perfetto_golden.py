"""The Perfetto protobuf reader against traces of our own (tests/builders/perfetto_traces.py):
every lane, event (to the ns), arrow, memory series, counter, arg and metadata key the builder
wrote, read back exactly. The expected facts come from how each trace was built, never from the
reader."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from branchscope.profiling import load_trace, load_traces
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.sources import open_source
from tests.builders import perfetto_traces as pt
from tests.builders.perfetto_facts import assert_facts, lane_events
from tests.builders.perfetto_traces import Built


def load_built(tmp_path: Path, built: Built, name: str = "t.pftrace") -> Trace:
    return load_trace(pt.write(tmp_path / name, built.data))


def index_of(trace: Trace, name: str) -> int:
    (i,) = [i for i in range(len(trace)) if trace.event_name(i) == name]
    return i


# ---- every trace: its lanes and events exactly -------------------------------------------------


@pytest.mark.parametrize("name", sorted(pt.ALL))
def test_lanes_and_events_exact(tmp_path: Path, name: str) -> None:
    built = pt.ALL[name]()
    assert_facts(load_built(tmp_path, built), built.facts)


def test_nesting_depth_of_begin_end_slices(tmp_path: Path) -> None:
    trace = load_built(tmp_path, pt.threads_trace())
    assert {trace.event_name(i): int(trace.depth[i]) for i in range(len(trace))} == pt.THREADS_DEPTH
    assert trace.event_name(int(trace.parent[index_of(trace, "aten::addmm")])) == "aten::linear"


# ---- GPU streams and flows ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpu", "kineto"])
def test_launch_arrows_from_flow_ids(tmp_path: Path, name: str) -> None:
    built = pt.ALL[name]()
    trace = load_built(tmp_path, built)
    flows = trace.flows
    assert (flows.src >= 0).all() and (flows.dst >= 0).all()

    def end(i: int) -> tuple[str, int]:
        return trace.event_name(i), int(trace.start_ns[i])

    assert {(end(s), end(d)) for s, d in zip(flows.src.tolist(), flows.dst.tolist())} == built.facts.arrows
    assert len(flows) == len(built.facts.arrows)
    assert not flows.from_correlation.any()  # from the flow ids, not from correlation args
    assert {flows.cats[c] for c in flows.cat_id.tolist()} == {"ac2g"}  # launch -> kernel, as kineto's JSON
    assert {trace.lanes[int(trace.lane[s])].kind for s in flows.src.tolist()} == {"cpu"}
    assert {trace.lanes[int(trace.lane[d])].kind for d in flows.dst.tolist()} == {"gpu"}


# ---- memory and counters -----------------------------------------------------------------------


def test_memory_instants_make_series(tmp_path: Path) -> None:
    built = pt.counters_trace()
    trace = load_built(tmp_path, built)
    assert sorted(m.device for m in trace.memory) == sorted(built.facts.memory)
    for m in trace.memory:
        want = built.facts.memory[m.device]
        got = {column: getattr(m, column).tolist() for column in want}
        assert got == want, m.device
        assert m.has_addr and m.peak_bytes == max(want["total_bytes"])


def test_counter_tracks(tmp_path: Path) -> None:
    built = pt.counters_trace()
    trace = load_built(tmp_path, built)
    got = {c.name: (c.pid, c.ts_ns.tolist(), c.values.tolist()) for c in trace.counters}
    assert got == built.facts.counters


# ---- interned names, args ----------------------------------------------------------------------


def test_interned_debug_annotation_name(tmp_path: Path) -> None:
    built = pt.interned_trace()
    trace = load_built(tmp_path, built)
    assert trace.event_args(index_of(trace, "delta")) == built.facts.args["delta"]
    assert trace.event_args(index_of(trace, "alpha")) == {}


def test_an_end_events_annotations_join_its_slices_args(tmp_path: Path) -> None:
    built = pt.unended_trace()
    trace = load_built(tmp_path, built)
    assert trace.event_args(index_of(trace, "aten::mm")) == built.facts.args["aten::mm"]
    assert trace.event(index_of(trace, "aten::mm")).shapes == [[2, 3]]


def test_debug_annotations_of_every_kind_as_args(tmp_path: Path) -> None:
    built = pt.args_trace()
    trace = load_built(tmp_path, built)
    args = trace.event_args(index_of(trace, "aten::mm"))
    assert args == built.facts.args["aten::mm"]
    # Equal is not enough: True == 1 and 2.5 == 2.5 whatever the types; each keeps JSON's type.
    assert {k: type(v) for k, v in args.items()} == {k: type(v) for k, v in built.facts.args["aten::mm"].items()}
    assert [type(v) for v in args["array"]] == [int, str, float, bool]


# ---- the same trace in other wrappings ---------------------------------------------------------


@pytest.mark.parametrize("name", ["t.pftrace.gz", "t.perfetto-trace", "t.pb", "t.json", "t.json.gz", "t"])
def test_protobuf_recognised_by_content(tmp_path: Path, name: str) -> None:
    built = pt.gpu_trace()
    data = gzip.compress(built.data) if name.endswith(".gz") else built.data
    assert_facts(load_trace(pt.write(tmp_path / name, data)), built.facts)


@pytest.mark.parametrize("name", ["t.pftrace", "t.perfetto-trace", "t.pftrace.gz"])
def test_json_in_a_pftrace_name_opens_as_json(tmp_path: Path, name: str) -> None:
    data, facts = pt.json_twin()
    data = gzip.compress(data) if name.endswith(".gz") else data
    assert_facts(load_trace(pt.write(tmp_path / name, data)), facts)


def test_gzipped_pftrace_opens_through_open_source(tmp_path: Path) -> None:
    built = pt.threads_trace()
    path = pt.write(tmp_path / "trace.pftrace.gz", gzip.compress(built.data))
    assert_facts(open_source(path).load(), built.facts)


# ---- ranks, metadata ---------------------------------------------------------------------------


def test_metadata_read_back_exactly(tmp_path: Path) -> None:
    trace = load_built(tmp_path, pt.rank_trace(1))
    assert trace.metadata == pt.rank_metadata(1)
    assert trace.rank == 1 and trace.base_time_ns == pt.rank_metadata(1)["baseTimeNanoseconds"]


def _merged_facts() -> dict[tuple[int, str], list[tuple[str, int, int, str]]]:
    """Each rank's events by (rank, lane name): times as built, every rank on the one BOOTTIME clock."""
    return {(r, lane): evs for r in (0, 1) for lane, evs in pt.rank_trace(r).facts.sorted_events().items()}


def _merged_events(trace: Trace) -> dict[tuple[int, str], list[tuple[str, int, int, str]]]:
    return {(ln.rank, ln.name): evs for ln, evs in zip(trace.lanes, lane_events(trace))}


def _check_job(trace: Trace) -> None:
    assert {ln.rank for ln in trace.lanes} == {0, 1}
    assert len(trace.lanes) == 4
    assert _merged_events(trace) == _merged_facts()
    gpus = sorted((ln.rank, ln.device, ln.tid) for ln in trace.lanes if ln.kind == "gpu")
    assert gpus == [(0, 0, 7), (1, 1, 7)]


def test_rank_folder_opens_as_one_job(tmp_path: Path) -> None:
    folder = pt.write_rank_folder(tmp_path / "job")
    _check_job(open_source(folder).load())


def test_rank_files_merge_by_their_metadata_not_their_names(tmp_path: Path) -> None:
    job = pt.write_rank_folder(tmp_path / "job")
    # Each file named as the other rank: the rank its distributedInfo says wins.
    swapped = [(job / f"rank-{r}.pftrace").rename(tmp_path / f"rank-{1 - r}.pftrace") for r in (0, 1)]
    assert [load_trace(p).rank for p in swapped] == [0, 1]
    _check_job(load_traces(swapped))


def test_streamed_rank_file_is_the_built_trace(tmp_path: Path) -> None:
    """StreamingTraceProtoBuilder's file (a Trace message per packet) reads as the one built."""
    folder = pt.write_rank_folder(tmp_path / "job")
    built = pt.rank_trace(0)
    assert_facts(load_trace(folder / "rank-0.pftrace"), built.facts)
    assert load_trace(folder / "rank-0.pftrace").metadata == pt.rank_metadata(0)
