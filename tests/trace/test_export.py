"""`export_trace`: what branchscope opens, written as Chrome JSON or Perfetto protobuf, opens again
with the same facts (every event's name, lane, start and duration to the ns, its args, the lanes,
arrows, memory series, counters, metadata and RunInfo: `trace_facts`); and the file promises: an
existing OUT refused unless forced, only a file replaced, no half-written OUT."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from branchscope.profiling.trace import export_chrome
from branchscope.profiling.trace.export import export_format, export_trace, load_source_trace
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.reader import load_trace
from tests.builders.export_traces import MAIN, PID, WORKER, kineto_like_events, trace_facts, write_kineto_like
from tests.builders.public_traces import public_trace_path
from tests.builders.ranks import write_rank_job
from tests.builders.runs import write_run_folder, write_small_trace
from tests.paths import SHARED_TRACES

#: The endings a round trip is made through.
ROUND_TRIPS = [".json", ".json.gz", ".pftrace", ".perfetto-trace"]
def round_trip(source: Path, tmp_path: Path, suffix: str, **facts_kw: bool) -> tuple[dict, dict]:
    """The facts of `source` and of its export to `suffix`."""
    before = load_source_trace(source)
    out = export_trace(source, tmp_path / f"export{suffix}")
    return trace_facts(before, **facts_kw), trace_facts(load_trace(out), **facts_kw)


@pytest.mark.parametrize("suffix", ROUND_TRIPS)
def test_a_kineto_like_trace_round_trips_every_fact(tmp_path, suffix):
    before, after = round_trip(write_kineto_like(tmp_path / "k.json"), tmp_path, suffix)
    assert after == before
    assert len(before["events"]) == 14 and len(before["flows"]) == 2 and len(before["memory"]) == 2


@pytest.mark.parametrize("suffix", ROUND_TRIPS)
def test_arrow_categories_round_trip(tmp_path, suffix):
    """Each arrow keeps its category (kineto's "ac2g" launch-to-kernel, "fwdbwd" forward-to-backward),
    through Perfetto too, whose flows have none (the exporter's annotation of the slices starting
    them), and the annotation is no event's arg."""
    events = kineto_like_events()
    for ph, tid, ts in (("s", WORKER, "1002.000"), ("f", MAIN, "1010.001")):  # aten::relu -> aten::mm
        events.append({"ph": ph, "bp": "e", "cat": "fwdbwd", "name": "fwdbwd", "id": 99, "pid": PID, "tid": tid, "ts": ts})
    source = tmp_path / "k.json"
    source.write_text(json.dumps({"traceEvents": events}))
    before = load_source_trace(source)
    after = load_trace(export_trace(source, tmp_path / f"export{suffix}"))
    assert sorted(before.flows.cats[c] for c in before.flows.cat_id.tolist()) == ["ac2g", "ac2g", "fwdbwd"]
    assert trace_facts(after)["flows"] == trace_facts(before)["flows"]
    assert trace_facts(after)["args"] == trace_facts(before)["args"]


@pytest.mark.parametrize("suffix", ROUND_TRIPS)
@pytest.mark.parametrize("mode", ["fork", "threads", "sequential"])
def test_a_run_folder_round_trips_with_its_run_info_and_cpu_samples(tmp_path, suffix, mode):
    folder = write_run_folder(tmp_path / "run", mode, 2, 1, 20.0)
    before, after = round_trip(folder, tmp_path, suffix)
    assert after == before
    assert before["run_info"].mode == mode and before["counters"]


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_a_rank_folder_is_one_trace_with_a_process_per_rank(tmp_path, suffix):
    """Every rank's events and memory, on the clock they were merged on, each rank's processes
    named "rank R"; the ranks' processes that shared a pid (each rank's GPU 0..) apart."""
    folder = write_rank_job(tmp_path / "job", ranks=3, steps=2)
    for f in folder.iterdir():  # every rank its pid 1000 and its GPU 0, as on hosts of their own
        doc = json.loads(f.read_text())
        for e in doc["traceEvents"]:
            e["pid"] = 0 if e.get("cat") == "kernel" else 1000
            e["tid"] = 1000 if e["tid"] != 7 else 7
        f.write_text(json.dumps(doc))
    before = load_source_trace(folder)
    out = export_trace(folder, tmp_path / f"job{suffix}")
    after = load_trace(out)
    assert len(after) == len(before)
    facts_kw = {"with_pid": False}
    fa, fb = trace_facts(before, **facts_kw), trace_facts(after, **facts_kw)
    assert fb["events"] == fa["events"] and fb["flows"] == fa["flows"]
    assert len(after.lanes) == len(before.lanes) == 6  # per rank: its main thread and its GPU's stream
    assert len({(ln.pid, ln.tid) for ln in after.lanes}) == 6
    assert len({ln.pid for ln in before.lanes}) == 2  # what was merged shared two pids
    assert sorted(m.events for m in after.memory) == sorted(m.events for m in before.memory)


def _public(name: str) -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("no shared public traces here")
    return public_trace_path(SHARED_TRACES, name)


@pytest.mark.parametrize("suffix", [".json.gz", ".pftrace"])
@pytest.mark.parametrize("name", ["hta_ns_resolution_fwdbwd.pt.trace.json.gz", "kineto_legacy_resnet50_v100.pt.trace.json.gz"])
def test_public_traces_round_trip(tmp_path, suffix, name):
    before, after = round_trip(_public(name), tmp_path, suffix, with_args=False)
    assert after == before


def test_the_format_is_told_by_the_name():
    assert export_format("a.pftrace") == export_format("a.PERFETTO-TRACE") == "perfetto"
    assert export_format("a.json") == export_format("a.json.gz") == "chrome"
    for bad in ("a.txt", "a.gz", ".json", "a.pb"):
        with pytest.raises(TraceFormatError, match="cannot tell the format"):
            export_format(bad)


def test_json_times_are_microseconds_with_three_decimals_exact_to_the_ns(tmp_path):
    out = export_trace(write_kineto_like(tmp_path / "k.json"), tmp_path / "k.json.gz")
    text = gzip.decompress(out.read_bytes()).decode()
    assert '"ts": 1010.001, "dur": 100.999' in text
    assert export_chrome.us_texts([-1500, 0, 7, 1_000_001]) == ["-1.500", "0.000", "0.007", "1000.001"]


# ---------------------------------------------------------------------------- the files


def test_an_existing_out_is_refused_and_left_as_it_was(tmp_path):
    src = write_kineto_like(tmp_path / "k.json")
    out = tmp_path / "mine.json"
    out.write_text("not branchscope's")
    for suffix_out in (out, out.with_suffix(".pftrace")):
        if suffix_out.suffix == ".pftrace":
            suffix_out.write_text("not branchscope's")
        with pytest.raises(TraceFormatError, match="exists; pass --force"):
            export_trace(src, suffix_out)
        assert suffix_out.read_text() == "not branchscope's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "mine.json", "mine.pftrace"]


def test_force_replaces_a_file_and_never_a_folder_or_a_link_target(tmp_path):
    src = write_kineto_like(tmp_path / "k.json")
    out = tmp_path / "out.json"
    out.write_text("old")
    export_trace(src, out, force=True)
    assert len(load_trace(out)) == 14
    folder = tmp_path / "dir.json"
    folder.mkdir()
    with pytest.raises(TraceFormatError, match="not a regular file"):
        export_trace(src, folder, force=True)
    target = tmp_path / "target.txt"
    target.write_text("kept")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(TraceFormatError, match="not a regular file"):
        export_trace(src, link, force=True)
    assert target.read_text() == "kept" and folder.is_dir()


def test_a_failed_export_leaves_no_out_and_no_temporary_file(tmp_path, monkeypatch):
    src = write_kineto_like(tmp_path / "k.json")
    before = sorted(os.listdir(tmp_path))

    def half_then_fail(trace, f):
        f.write(b'{"traceEvents": [')
        raise OSError("disk full")

    monkeypatch.setattr(export_chrome, "write_chrome", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        export_trace(src, tmp_path / "out.json")
    assert sorted(os.listdir(tmp_path)) == before


def test_an_out_made_while_exporting_is_not_replaced(tmp_path, monkeypatch):
    src = write_kineto_like(tmp_path / "k.json")
    out = tmp_path / "out.json"
    real = export_chrome.write_chrome

    def meanwhile(trace, f):
        out.write_text("someone else's")
        real(trace, f)

    monkeypatch.setattr(export_chrome, "write_chrome", meanwhile)
    with pytest.raises(TraceFormatError, match="exists"):
        export_trace(src, out)
    assert out.read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "out.json"]


def test_what_is_no_trace_is_refused_in_one_line(tmp_path):
    from tests.builders.runs import write_sweep_folder

    sweep = write_sweep_folder(tmp_path / "sweep")
    with pytest.raises(TraceFormatError, match="is a sweep folder"):
        export_trace(sweep, tmp_path / "s.json")
    (tmp_path / "junk.json").write_text("{nope")
    with pytest.raises(TraceFormatError):
        export_trace(tmp_path / "junk.json", tmp_path / "o.pftrace")
    with pytest.raises(TraceFormatError, match="does not exist"):
        export_trace(write_small_trace(tmp_path / "t.json"), tmp_path / "no" / "o.json")
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "o.pftrace").exists()


def test_a_sweep_cell_exports_as_its_run(tmp_path):
    from tests.builders.runs import write_sweep_folder

    sweep = write_sweep_folder(tmp_path / "sweep")
    cell = next(p for p in sweep.iterdir() if p.is_dir())
    before, after = round_trip(cell, tmp_path, ".json")
    assert after == before


def test_the_counters_made_for_perfettos_ui_are_not_read_back_as_the_traces(tmp_path):
    """Memory totals and pool occupancy are written as counter tracks for Perfetto's UI only: the
    reader leaves them out, so a round trip gives the trace's own counters and no more."""
    folder = write_run_folder(tmp_path / "run", "fork", 2, 1, 20.0)
    before = load_source_trace(folder)
    after = load_trace(export_trace(folder, tmp_path / "run.pftrace"))
    assert sorted((c.name, c.key, c.cat) for c in after.counters) == sorted((c.name, c.key, c.cat) for c in before.counters)


def test_an_export_never_replaces_its_source_nor_writes_into_its_folder(tmp_path):
    src = write_kineto_like(tmp_path / "k.json")
    with pytest.raises(TraceFormatError, match="is the source"):
        export_trace(src, src, force=True)
    with pytest.raises(TraceFormatError, match="is the source"):  # a loaded trace knows its file too
        export_trace(load_trace(src), src, force=True)
    (tmp_path / "k.json.gz").symlink_to(src)
    run = write_run_folder(tmp_path / "run", "fork", 2, 1, 20.0)
    kept = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for out in (run / "trace.json.gz", run / "export.pftrace", run / "sub" / "x.json"):
        out.parent.mkdir(exist_ok=True)
        with pytest.raises(TraceFormatError, match="inside the source folder"):
            export_trace(run, out, force=True)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == kept
    assert src.read_text().startswith("{") and len(load_trace(src)) == 14


def test_the_temporary_file_gets_the_umask_without_the_umask_being_changed(tmp_path, monkeypatch):
    """Changing the umask to read it gives every other thread of the process umask 0 meanwhile."""
    umask = os.umask(0o027)
    os.umask(umask)

    def no_umask_change(_mask):
        raise AssertionError("the process's umask was changed")

    monkeypatch.setattr(os, "umask", no_umask_change)
    out = export_trace(write_kineto_like(tmp_path / "k.json"), tmp_path / "out.json")
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
