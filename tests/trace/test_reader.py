"""The reader against real traces: ones torch writes now, and public ones from real GPU runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from branchscope.profiling import load_trace
from branchscope.profiling.trace.analyses import lane_busy_ns
from tests.builders.public_traces import FACTS


def _raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


# ---- traces torch writes at test time --------------------------------------------------------


def test_sequential_trace_has_every_complete_event_once(torch_traces: Path) -> None:
    path = torch_traces / "sequential.json"
    raw = [e for e in _raw_events(path) if e.get("ph") == "X" and isinstance(e.get("pid"), int)]
    trace = load_trace(path)
    assert len(trace) == len(raw)
    assert sorted(trace.names[i] for i in trace.name_id) == sorted(e["name"] for e in raw)
    main = trace.lanes_of("cpu", "main")
    assert len(main) == 1 and main[0].tid == main[0].pid
    steps = [i for i in range(len(trace)) if trace.event_name(i).startswith("step ")]
    assert len(steps) == 3
    assert all(trace.depth[i] == 0 for i in steps)
    # Ops inside a step are nested under it.
    assert int(trace.depth.max()) >= 1


def test_forked_trace_shows_inter_op_pool_lanes(torch_traces: Path) -> None:
    trace = load_trace(torch_traces / "forked.pt.trace.json.gz")
    pool = trace.lanes_of("cpu", "interop")
    assert pool, [ln.name for ln in trace.lanes]
    assert all("PTThreadPool" in ln.name for ln in pool)
    # The forked branch ran on a pool thread while the main thread ran the other branch.
    branch_lanes = {int(trace.lane[i]) for i in range(len(trace)) if trace.event_name(i) == "branch: mm"}
    assert any(trace.lanes[i].role == "interop" for i in branch_lanes)
    assert any(trace.lanes[i].role == "main" for i in branch_lanes)


def test_lane_order_groups_main_then_pool(torch_traces: Path) -> None:
    trace = load_trace(torch_traces / "forked.pt.trace.json.gz")
    roles = [ln.role for ln in trace.lanes]
    assert roles == sorted(roles, key=["main", "interop", "autograd", "other"].index)


def test_timestamps_keep_nanoseconds(torch_traces: Path) -> None:
    path = torch_traces / "sequential.json"
    raw = [e for e in _raw_events(path) if e.get("ph") == "X" and isinstance(e.get("pid"), int)]
    trace = load_trace(path)
    # Compare against the decimal text, which keeps 3 decimals of µs: exact ns.
    expected = sorted(round(float(repr(e["ts"])) * 1000) for e in raw)
    got = sorted(trace.start_ns.tolist())
    assert max(abs(a - b) for a, b in zip(expected, got)) <= 1


def test_cpu_memory_events_read(torch_traces: Path) -> None:
    trace = load_trace(torch_traces / "sequential.json")
    (cpu,) = [m for m in trace.memory if m.device == "cpu"]
    assert cpu.events > 0 and cpu.peak_bytes > 0
    assert np.all(np.diff(cpu.ts_ns) >= 0)


def test_event_args_decode_lazily_with_shapes(torch_traces: Path) -> None:
    trace = load_trace(torch_traces / "sequential.json")
    addmm = [i for i in range(len(trace)) if trace.event_name(i) == "aten::addmm"]
    assert addmm
    view = trace.event(addmm[0])
    assert [32, 64] in view.shapes


# ---- public traces from real runs: facts in ../shared/traces/README.md (tests/builders/public_traces)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_public_trace_lanes_match_readme(shared_traces: Path, name: str) -> None:
    events, cpu, gpu = FACTS[name]
    trace = load_trace(shared_traces / name)
    assert len(trace) == events
    assert sorted(trace.lane_event_count(ln.index) for ln in trace.lanes_of("cpu")) == cpu
    assert sorted(trace.lane_event_count(ln.index) for ln in trace.lanes_of("gpu")) == gpu
    # Lane slices really hold their lane's events, start-sorted.
    for ln in trace.lanes:
        sl = trace.lane_slice(ln.index)
        assert np.all(trace.lane[sl] == ln.index)
        assert np.all(np.diff(trace.start_ns[sl]) >= 0)


def test_memory_peak_from_total_allocated(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "hta_gpu_memory_2streams.json.gz")
    cuda = {m.device: m for m in trace.memory if m.device.startswith("cuda")}
    assert list(cuda) == ["cuda:1"]
    assert cuda["cuda:1"].events == 26770
    assert cuda["cuda:1"].peak_bytes == 6_629_508_096


def test_memory_series_keep_address_reserved_thread_and_capacity(shared_traces: Path) -> None:
    path = shared_traces / "hta_gpu_memory_2streams.json.gz"
    trace = load_trace(path)
    raw = [e for e in _raw_events(path) if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1]
    raw.sort(key=lambda e: e["ts"])  # the reader's order: by time, stable
    (cuda,) = [m for m in trace.memory if m.device == "cuda:1"]
    assert cuda.addr.tolist() == [e["args"]["Addr"] for e in raw]
    assert cuda.reserved_bytes is not None
    assert cuda.reserved_bytes.tolist() == [e["args"]["Total Reserved"] for e in raw]
    assert cuda.tid.tolist() == [e["tid"] for e in raw] and set(cuda.pid.tolist()) == {783658}
    assert cuda.capacity_bytes == 34_089_730_048 and cuda.rank == 1 and cuda.has_addr


def test_legacy_memory_has_no_address_nor_reserved(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "kineto_legacy_resnet50_v100.pt.trace.json.gz")
    for m in trace.memory:
        assert not m.has_addr and m.reserved_bytes is None and m.rank is None
        assert m.addr.shape == m.ts_ns.shape
    assert [m.capacity_bytes for m in trace.memory] == [None, 34_084_028_416]


def test_legacy_memory_is_running_sum_of_bytes(shared_traces: Path) -> None:
    path = shared_traces / "kineto_legacy_resnet50_v100.pt.trace.json.gz"
    trace = load_trace(path)
    raw = [e for e in _raw_events(path) if e.get("name") == "[memory]"]
    for m in trace.memory:
        dev = [e for e in raw if (e["args"]["Device Type"] == 0) == (m.device == "cpu")]
        dev.sort(key=lambda e: e["ts"])
        assert m.events == len(dev)
        assert m.peak_bytes == max(np.cumsum([e["args"]["Bytes"] for e in dev]))


def test_legacy_stream_tids_become_gpu_lanes(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "kineto_legacy_resnet50_v100.pt.trace.json.gz")
    (gpu,) = trace.lanes_of("gpu")
    assert (gpu.device, gpu.tid) == (0, 7)


def test_negative_tids_kept(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "hta_gpu_6streams_rank0.json.gz")
    tids = {ln.tid for ln in trace.lanes_of("cpu")}
    assert -1220540864 in tids and -1107294656 in tids


def test_ns_decimals_exact_on_float_timestamps(shared_traces: Path) -> None:
    path = shared_traces / "hta_ns_resolution_fwdbwd.pt.trace.json.gz"
    trace = load_trace(path)
    with gzip.open(path, "rb") as f:
        text = f.read()
    # The first complete event's ts as written, parsed as a decimal.
    doc = json.loads(text, parse_float=str)
    first = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("pid"), int))
    whole, _, frac = str(first["ts"]).partition(".")
    expected = int(whole) * 1000 + int((frac + "000")[:3])
    assert expected in set(trace.start_ns.tolist())


def test_roles_and_autograd_thread(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "hta_ns_resolution_fwdbwd.pt.trace.json.gz")
    roles = {ln.role for ln in trace.lanes_of("cpu")}
    assert {"main", "autograd"} <= roles
    assert [ln.name for ln in trace.lanes_of("cpu", "autograd")] == ["thread 1262 (pt_autograd_0)"]


def test_metadata_rank_and_base_time(shared_traces: Path) -> None:
    assert load_trace(shared_traces / "hta_two_ranks/rank-1.json.gz").rank == 1
    amd = load_trace(shared_traces / "hta_amd_mi250_relative_ts.json.gz")
    assert amd.base_time_ns is not None
    assert len(amd.metadata["deviceProperties"]) > 0


def test_flows_bind_launches_to_kernels(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "hta_gpu_memory_2streams.json.gz")
    flows = trace.flows
    ac2g = flows.cat_id == flows.cats.index("ac2g")
    src, dst = flows.src[ac2g], flows.dst[ac2g]
    assert src.size > 20000
    bound = (src >= 0) & (dst >= 0)
    assert bound.mean() > 0.99
    kinds = np.array([ln.kind for ln in trace.lanes])
    assert np.all(kinds[trace.lane[src[bound]]] == "cpu")
    assert np.all(kinds[trace.lane[dst[bound]]] == "gpu")
    assert np.all(trace.start_ns[dst[bound]] >= trace.start_ns[src[bound]])


def test_busy_time_is_union_of_top_level(shared_traces: Path) -> None:
    trace = load_trace(shared_traces / "hta_cpu_only.pt.trace.json.gz")
    busy = lane_busy_ns(trace)
    for ln in trace.lanes:
        sl = trace.lane_slice(ln.index)
        top = trace.depth[sl] == 0
        # Top-level events of a well-nested lane don't overlap: busy = their summed durations.
        assert busy[ln.index] == int(trace.dur_ns[sl][top].sum())


def test_two_ranks_merge_side_by_side(shared_traces: Path) -> None:
    from branchscope.profiling import load_traces

    paths = [shared_traces / "hta_two_ranks/rank-0.json.gz", shared_traces / "hta_two_ranks/rank-1.json.gz"]
    merged = load_traces(paths)
    assert len(merged) == 4810 + 4675
    assert {ln.rank for ln in merged.lanes} == {0, 1}
    assert sorted(merged.lane_event_count(ln.index) for ln in merged.lanes if ln.rank == 1) == sorted(
        [1742, 1779, 2, 8, 16, 126, 1002]
    )
    assert all(ln.label.startswith(f"rank {ln.rank} ") for ln in merged.lanes)
    one = load_trace(paths[1])
    assert merged.span()[1] == max(load_trace(paths[0]).span()[1], one.span()[1])


def test_memory_addresses_above_int64_wrap_and_bad_ones_fail(tmp_path: Path) -> None:
    from branchscope.profiling import TraceFormatError

    def memory(addr: object) -> dict:
        args = {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": 8, "Total Allocated": 8}
        return {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": args}

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [memory(2**64 - 16), memory(2**63 - 1)]}))
    assert load_trace(path).memory[0].addr.tolist() == [-16, 2**63 - 1]
    path.write_text(json.dumps({"traceEvents": [memory("0x10")]}))
    with pytest.raises(TraceFormatError, match="memory"):
        load_trace(path)


# ---- progress and cancel ---------------------------------------------------------------------


def _write_many_events(path: Path, n: int) -> Path:
    """A trace of `n` complete events on two threads (ns-decimal timestamps), a flow and memory."""
    events: list[dict] = [
        {"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1, "tid": 1 + i % 2,
         "ts": f"{1000 + i}.{i % 1000:03d}", "dur": 0.5, "args": {"seq": i}}
        for i in range(n)
    ]  # fmt: skip
    events.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1000, "args": {"Bytes": 8}})
    text = json.dumps({"traceEvents": events}).replace('"ts": "', '"ts": ').replace('", "dur"', ', "dur"')
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), compresslevel=1))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_progress_reports_each_phase_in_order(tmp_path: Path, suffix: str) -> None:
    path = _write_many_events(tmp_path / f"t{suffix}", 100_000)
    calls: list[tuple[str, float]] = []
    trace = load_trace(path, progress=lambda phase, f: calls.append((phase, f)) or True)
    assert len(trace) == 100_000 and trace.start_ns[-1] == (1000 + 99_999) * 1000 + 999
    phases = list(dict.fromkeys(p for p, _ in calls))
    assert phases == ["reading", "parsing", "events", "memory", "lanes"]
    for phase in phases:
        fractions = [f for p, f in calls if p == phase]
        assert all(0.0 <= f <= 1.0 for f in fractions)
        assert fractions == sorted(fractions)
    # The file is read and its events are decoded in several steps, each reported.
    assert len([1 for p, _ in calls if p == "reading"]) >= 2
    assert len([1 for p, _ in calls if p == "events"]) >= 2
    assert calls[-1] == ("lanes", 1.0)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("stop_at", ["reading", "parsing", "events", "memory", "lanes"])
def test_progress_returning_false_cancels(tmp_path: Path, suffix: str, stop_at: str) -> None:
    import gc

    from branchscope.profiling import TraceFormatError
    from branchscope.profiling.trace.model import LoadCancelled

    path = _write_many_events(tmp_path / f"t{suffix}", 100_000)
    seen: list[str] = []

    def progress(phase: str, fraction: float) -> bool:
        seen.append(phase)
        return phase != stop_at

    with pytest.raises(LoadCancelled) as caught:
        load_trace(path, progress=progress)
    assert not isinstance(caught.value, TraceFormatError)
    assert seen[-1] == stop_at and seen.count(stop_at) == 1  # nothing was called after the refusal
    assert gc.isenabled()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing left behind


def test_progress_none_means_go_on(tmp_path: Path) -> None:
    path = _write_many_events(tmp_path / "t.json", 1000)
    assert len(load_trace(path, progress=lambda phase, f: None)) == 1000  # type: ignore[arg-type,return-value]


def test_load_traces_forwards_progress(shared_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from branchscope.profiling import load_traces
    from branchscope.profiling.trace import merge

    paths = [shared_traces / "hta_two_ranks/rank-0.json.gz", shared_traces / "hta_two_ranks/rank-1.json.gz"]
    calls: list[str] = []
    monkeypatch.setattr(merge, "POOL_WORKERS", lambda: 1)  # one file after another, here
    merged = load_traces(paths, progress=lambda phase, f: calls.append(phase) or True)
    assert len(merged) == 4810 + 4675
    assert calls.count("parsing") >= 2  # once at least per file
    # Read by the pool of forked children (issue 23): files done of all, up to the whole.
    monkeypatch.setattr(merge, "POOL_WORKERS", lambda: 2)
    seen: list[tuple[str, float]] = []
    merged = load_traces(paths, progress=lambda phase, f: seen.append((phase, f)) or True)
    assert len(merged) == 4810 + 4675
    assert {phase for phase, _ in seen} == {"files"} and seen[-1] == ("files", 1.0)


# ---- exact ns from decimal text, vectorised ---------------------------------------------------


def _exact_ns(text: str) -> int:
    """The reader's rule, by hand: µs text -> ns, 3 decimals kept, the 4th rounds half up."""
    neg = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    ns = int(whole or "0") * 1000 + int(frac[:3].ljust(3, "0")) + (len(frac) > 3 and frac[3] >= "5")
    return -ns if neg else ns


_DECIMAL_TEXT = st.builds(
    lambda neg, whole, frac, dot: ("-" if neg else "") + whole + ("." + frac if dot else ""),
    st.booleans(),
    st.from_regex(r"[0-9]{1,16}", fullmatch=True),
    st.from_regex(r"[0-9]{0,5}", fullmatch=True),
    st.booleans(),
)


@given(st.lists(st.one_of(_DECIMAL_TEXT, st.integers(-(10**14), 10**14)), min_size=1, max_size=300))
@settings(max_examples=200, deadline=None)
def test_decimal_timestamps_convert_exactly(values: list) -> None:
    from branchscope.profiling.trace.reader import _MAX_ABS_NS, _ns_column

    expected = [v * 1000 if isinstance(v, int) else _exact_ns(v) for v in values]
    if any(abs(e) >= _MAX_ABS_NS for e in expected):
        with pytest.raises(ValueError, match="out of range"):
            _ns_column(values, "timestamp")
    else:
        assert _ns_column(values, "timestamp").tolist() == expected


def test_ns_decimal_trace_loads_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    whole = rng.integers(1_700_000_000_000_000, 1_800_000_000_000_000, 5000)
    frac = rng.integers(0, 1000, 5000)
    lens = rng.integers(0, 4, 5000)  # 0..3 decimals written, as real traces mix them
    texts = [f"{w}" + (f".{f:03d}"[: 1 + k] if k else "") for w, f, k in zip(whole.tolist(), frac.tolist(), lens.tolist())]
    body = ",".join(
        f'{{"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": {t}, "dur": {i % 7}.5{i % 10}}}'
        for i, t in enumerate(texts)
    )
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + body + "]}")
    trace = load_trace(path)
    assert sorted(trace.start_ns.tolist()) == sorted(_exact_ns(t) for t in texts)
    assert sorted(trace.dur_ns.tolist()) == sorted((i % 7) * 1000 + 500 + (i % 10) * 10 for i in range(5000))
