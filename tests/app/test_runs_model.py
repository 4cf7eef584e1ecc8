"""The window's runs model without Qt: entries, the trace cache, baseline and speedup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from branchscope.app.runs import TRACE_CACHE, Entry, Runs, RunSpec
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.step_stats import speedup as stats_speedup
from tests.paths import ROOT


def run(mode: str, median: float | None, model: str = "inception", threads=(1, 1), spread: float = 1.0) -> Entry:
    """A run whose unprofiled steps have `median` and quartiles `spread` ms either side."""
    spec = RunSpec(mode, *threads, options=RunOptions(demo=model))
    steps = [median - 2 * spread, median - spread, median, median + spread, median + 2 * spread] if median else []
    info = {"median_ms": 999.0, "unprofiled_steps_ms": steps} if median is not None else {}  # profiled: ignored
    return Entry(model, Path(f"/runs/{model}-{mode}/trace.json.gz"), spec=spec, run=RunRecord.parse(info))


def opened(name: str) -> Entry:
    return Entry(name, Path(f"/traces/{name}"))


class Recorder:
    """A `RunsObserver` writing down what it was told."""

    def __init__(self):
        self.calls: list[tuple] = []

    def rows_about_to_be_inserted(self, first, last):
        self.calls.append(("insert?", first, last))

    def rows_inserted(self):
        self.calls.append(("inserted",))

    def rows_about_to_be_removed(self, first, last):
        self.calls.append(("remove?", first, last))

    def rows_removed(self):
        self.calls.append(("removed",))

    def rows_changed(self, first, last):
        self.calls.append(("changed", first, last))


def test_the_runs_model_imports_no_qt():
    code = "import sys, branchscope.app.runs; print([m for m in sys.modules if m.startswith(('PySide6', 'shiboken'))])"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_entries_keep_their_order_and_observers_hear_of_every_change():
    runs, seen = Runs(), Recorder()
    runs.add_observer(seen)
    assert runs.append(run("sequential", 40.0)) == 0
    assert runs.append(opened("a.json")) == 1
    assert [e.label for e in runs] == ["inception", "a.json"] and len(runs) == 2
    assert seen.calls == [("insert?", 0, 0), ("inserted",), ("changed", 0, 0),
                          ("insert?", 1, 1), ("inserted",), ("changed", 0, 1)]  # fmt: skip
    seen.calls.clear()
    assert runs.remove(0).label == "inception"
    assert [e.label for e in runs] == ["a.json"]
    assert seen.calls == [("remove?", 0, 0), ("removed",), ("changed", 0, 0)]


def test_an_entry_names_its_files_medians_and_title():
    merged = Entry("ranks 0, 1", Path("/t/rank-0.json"), more_paths=(Path("/t/rank-1.json"),))
    assert merged.paths == (Path("/t/rank-0.json"), Path("/t/rank-1.json"))
    assert merged.median_ms is None and merged.stats is None and merged.title == "ranks 0, 1"
    e = Entry("inception", Path("/r/trace.json.gz"), spec=RunSpec("fork", 2, 1),
              run=RunRecord.parse({"median_ms": 20, "unprofiled_steps_ms": [12.0, 10.0, 11.0, 30.0]}))  # fmt: skip
    assert e.median_ms == 20.0 and e.title == "inception · fork · 2×1"
    assert (e.stats.n, e.stats.median, e.stats.min, e.stats.max) == (4, 11.5, 10.0, 30.0)
    assert Entry("x", Path("/x"), run=RunRecord.parse({"median_ms": "fast", "unprofiled_steps_ms": "slow"})).median_ms is None
    assert Entry("x", Path("/x"), run=RunRecord.parse({"unprofiled_steps_ms": "slow"})).stats is None
    # without a spec, mode and threads come from run.json
    bare = Entry("twin-mm", Path("/x"), run=RunRecord.parse({"mode": "fork", "interop": 2, "intra": 3, "model": "demo twin-mm", "source": "demo"}))
    assert bare.title == "twin-mm · fork · 2×3" and bare.model_key == RunSpec("fork", 2, 3, options=RunOptions(demo="twin-mm")).model_key


def test_speedup_is_the_unprofiled_median_of_the_models_sequential_1x1_run_over_this_runs():
    runs = Runs()
    runs.append(run("fork", 20.0, threads=(2, 1)))  # before any sequential run of its model
    runs.append(run("sequential", 40.0))
    runs.append(run("sequential", 30.0, threads=(1, 2)))  # sequential, but not 1×1
    runs.append(run("fork", 10.0, threads=(2, 1)))
    runs.append(run("fork", 5.0, model="lstm", threads=(2, 1)))  # no sequential 1×1 run of its model
    runs.append(opened("a.json"))
    runs.append(run("fork", None))  # no unprofiled steps
    assert [runs.baseline_of(k) for k in range(len(runs))] == [1, 1, 1, 1, None, None, 1]
    assert [runs.speedup(k) for k in range(len(runs))] == [2.0, 1.0, 40 / 30, 4.0, None, None, None]
    assert [runs.is_baseline(k) for k in range(len(runs))] == [False, True, False, False, False, False, False]


def test_the_default_baseline_is_the_latest_sequential_1x1_run_with_unprofiled_steps():
    runs = Runs()
    runs.append(run("sequential", 40.0))
    runs.append(run("fork", 20.0, threads=(2, 1)))
    runs.append(run("sequential", 50.0))  # measured again, later
    runs.append(run("sequential", None))  # an old run without unprofiled steps: no baseline
    assert [runs.baseline_of(k) for k in range(4)] == [2, 2, 2, 2]
    assert runs.speedup(1) == 2.5 and runs.speedup(0) == 1.25


def test_within_noise_when_the_interquartile_ranges_overlap():
    runs = Runs()
    runs.append(run("sequential", 40.0, spread=1.0))  # IQR 39–41
    runs.append(run("fork", 38.5, threads=(2, 1), spread=1.0))  # IQR 37.5–39.5: overlaps
    runs.append(run("fork", 20.0, threads=(2, 1), spread=1.0))  # IQR 19–21: clearly faster
    runs.append(run("fork", None, threads=(2, 1)))
    assert [runs.within_noise(k) for k in range(4)] == [None, True, False, None]  # the baseline: no comparison
    assert runs[1].stats.q1 == 37.5 and runs[0].stats.q3 == 41.0


def test_a_set_baseline_applies_to_its_own_models_runs_only():
    runs, seen = Runs(), Recorder()
    runs.append(run("sequential", 40.0))
    runs.append(run("fork", 20.0, threads=(2, 1)))
    runs.append(run("fork", 10.0, threads=(4, 1)))
    runs.append(run("sequential", 8.0, model="lstm"))
    runs.append(run("fork", 4.0, model="lstm", threads=(2, 1)))
    runs.add_observer(seen)
    assert runs.baseline is None and not runs.has_set_baseline(1)
    runs.set_baseline(1)
    assert seen.calls == [("changed", 0, 4)]  # every speedup may have changed
    assert runs.baseline == 1 and runs.has_set_baseline(0) and not runs.has_set_baseline(3)
    assert [runs.speedup(k) for k in range(5)] == [0.5, 1.0, 2.0, 1.0, 2.0]  # lstm keeps its 1×1
    assert [runs.is_baseline(k) for k in range(5)] == [False, True, False, True, False]
    runs.baseline = 4  # the property sets too
    assert runs.speedup(3) == 0.5 and runs.speedup(2) == 2.0
    runs.reset_baseline(0)  # inception back to its default
    assert runs.speedup(2) == 4.0 and runs.speedup(3) == 0.5 and runs.baseline == 4
    runs.baseline = None  # every model back to its default
    assert [runs.speedup(k) for k in range(5)] == [1.0, 2.0, 4.0, 1.0, 2.0] and runs.baseline is None
    with pytest.raises(IndexError):
        runs.set_baseline(5)


def test_missing_baseline_is_the_1x1_sequential_spec_of_a_model_without_one():
    runs = Runs()
    spec = RunSpec("fork", 2, 2, options=RunOptions(steps=7, model=Path("/m/net.pt"), input_shapes=("8x3",), timeout=30.0))
    runs.append(Entry("net.pt", Path("/r/a/trace.json.gz"), spec=spec, run=RunRecord.parse({"unprofiled_steps_ms": [5.0]})))
    runs.append(opened("b.json"))
    assert runs.missing_baseline(0) == RunSpec("sequential", 1, 1, options=RunOptions(steps=7, model=Path("/m/net.pt"), input_shapes=("8x3",), timeout=30.0))
    assert runs.missing_baseline(1) is None  # nothing to repeat
    runs.append(Entry("net.pt", Path("/r/c/trace.json.gz"), spec=runs.missing_baseline(0), run=RunRecord.parse({"unprofiled_steps_ms": [10.0]})))
    assert runs.missing_baseline(0) is None and runs.speedup(0) == 2.0
    other = Runs()
    other.append(run("fork", 20.0, threads=(2, 1)))
    other.set_baseline(0)  # a baseline the user set counts
    assert other.missing_baseline(0) is None


def test_removing_entries_keeps_the_baselines_and_the_shown_entry_pointing_at_theirs():
    runs = Runs()
    for median in (40.0, 20.0, 10.0, 5.0):
        runs.append(run("fork", median, threads=(2, 1)))
    runs.set_baseline(2)
    runs.mark_shown(3)
    runs.remove(0)
    assert runs.baseline == 1 and runs.baseline_of(0) == 1 and runs[1].stats.median == 10.0
    assert runs.current == 2 and runs.cached == [2]
    runs.remove(1)  # the baseline itself
    assert runs.baseline is None and runs.baseline_of(0) is None and runs.current == 1
    runs.remove(1)
    assert runs.current == -1 and runs.cached == []


_RUNS = st.lists(
    st.tuples(
        st.sampled_from(["inception", "lstm"]),
        st.sampled_from(["sequential", "fork"]),
        st.sampled_from([(1, 1), (2, 1)]),
        st.sampled_from([None, 5.0, 10.0, 40.0]),
    ),
    min_size=1,
    max_size=7,
)


def _default_of(entries: list[Entry], e: Entry) -> Entry | None:
    """What `Runs` should take as entry e's default baseline, worked out here from scratch."""
    found = [b for b in entries if b.model_key == e.model_key and b.mode == "sequential"
             and b.threads == (1, 1) and b.stats is not None]  # fmt: skip
    return found[-1] if found else None


@given(specs=_RUNS, data=st.data())
@settings(max_examples=150, deadline=None)
def test_removing_entries_in_any_order_keeps_every_reference_on_its_entry(specs, data):
    runs = Runs(trace_cache=3)
    for model, mode, threads, median in specs:
        runs.append(run(mode, median, model=model, threads=threads))
    n = len(runs)
    for k in data.draw(st.lists(st.integers(0, n - 1), max_size=6), label="shown"):
        runs.mark_shown(k)
    for k in data.draw(st.lists(st.integers(0, n - 1), max_size=3), label="baselines set"):
        runs.set_baseline(k)
    order = data.draw(st.permutations(range(n)), label="removal order")
    # what each row stands for, as the entries themselves
    shown = runs[runs.current] if runs.current >= 0 else None
    cached = [runs[k] for k in runs.cached]
    set_by_user = {runs[k].model_key: runs[runs.baseline_of(k)] for k in range(n) if runs.has_set_baseline(k)}
    last_set = runs[runs.baseline] if runs.baseline is not None else None
    original = list(runs)
    gone: list[Entry] = []

    def is_gone(e: Entry) -> bool:
        return any(e is g for g in gone)

    for victim in order:  # the rows as they were before any removal, taken out in the drawn order
        gone.append(runs.remove(_row(runs, original[victim])))
        listed = list(runs)
        assert not any(is_gone(e) for e in listed)
        assert runs.current == (-1 if shown is None or is_gone(shown) else _row(runs, shown))
        assert [runs[k] for k in runs.cached] == [e for e in cached if not is_gone(e)]
        expected_last = None if last_set is None or is_gone(last_set) else last_set
        assert (runs[runs.baseline] if runs.baseline is not None else None) is expected_last
        for k, e in enumerate(listed):
            kept = set_by_user.get(e.model_key)
            if kept is not None and is_gone(kept):
                kept = None
            want = kept if kept is not None else _default_of(listed, e)
            assert runs.has_set_baseline(k) == (kept is not None)
            got = runs.baseline_of(k)
            assert (runs[got] if got is not None else None) is want
            assert runs.is_baseline(k) == (want is e)
            assert runs.speedup(k) == (None if want is None else stats_speedup(want.stats, e.stats))
    assert len(runs) == 0 and runs.current == -1 and runs.cached == [] and runs.baseline is None


def _row(runs: Runs, entry: Entry) -> int:
    return next(i for i, e in enumerate(runs) if e is entry)


def test_an_entry_is_found_by_identity_not_by_equal_fields():
    runs = Runs()
    a, b = opened("same.json"), opened("same.json")
    runs.extend([a, b])
    runs.mark_shown(1)
    assert runs.index_of(b) == 1 and runs.index_of(a) == 0 and runs.current_entry is b
    assert runs.index_of(opened("same.json")) == -1 and runs.index_of(None) == -1
    runs.remove(0)
    assert runs.current == 0 and runs.current_entry is b and runs.cached == [0]


def test_extend_lists_several_entries_in_one_insertion():
    runs, seen = Runs(), Recorder()
    runs.add_observer(seen)
    assert runs.extend([]) == 0 and seen.calls == []
    assert runs.extend([opened("a"), opened("b")]) == 0
    assert seen.calls == [("insert?", 0, 1), ("inserted",), ("changed", 0, 1)]


def test_load_reads_only_what_is_not_in_memory():
    runs = Runs()
    reads: list[tuple[Path, ...]] = []

    def read(paths):
        reads.append(tuple(paths))
        return f"trace of {paths[0].name}"

    kept = object()
    runs.append(Entry("a", Path("/a"), trace=kept))
    runs.append(Entry("b", Path("/b"), more_paths=(Path("/b1"),)))
    assert runs.load(0, read) == (kept, False) and reads == []
    assert runs.load(1, read) == ("trace of b", True) and reads == [(Path("/b"), Path("/b1"))]
    assert runs.load(1, read) == ("trace of b", False)

    def broken(_paths):
        raise OSError("gone")

    runs[1].trace = None
    with pytest.raises(OSError):
        runs.load(1, broken)
    assert runs[1].trace is None


def test_the_trace_cache_keeps_the_most_recently_shown():
    runs = Runs()
    for k in range(TRACE_CACHE + 2):
        runs.append(Entry(f"t{k}", Path(f"/t{k}"), trace=f"trace {k}"))
    for k in range(TRACE_CACHE):
        runs.mark_shown(k)
    runs.mark_shown(0)  # entry 1 is now the least recently shown
    runs.mark_shown(TRACE_CACHE)
    assert runs.current == TRACE_CACHE
    assert runs.cached == [2, 3, 0, 4]
    assert [k for k, e in enumerate(runs) if e.trace is not None] == [0, 2, 3, 4, 5]  # 5: never shown yet
    small = Runs(trace_cache=1)
    small.append(Entry("a", Path("/a"), trace="A"))
    small.append(Entry("b", Path("/b"), trace="B"))
    small.mark_shown(0)
    small.mark_shown(1)
    assert small[0].trace is None and small[1].trace == "B"
    with pytest.raises(ValueError):
        Runs(trace_cache=0)


def test_summary_line_says_what_ran_and_how_it_compares_with_the_baseline():
    from branchscope.app.runs import Entry, Runs, RunSpec

    def entry(mode, interop, intra, steps):
        spec = RunSpec(mode=mode, interop=interop, intra=intra, options=RunOptions(demo="inception"))
        run = {"unprofiled_steps_ms": steps, "branches": [{"name": f"b{i}"} for i in range(4)]}
        return Entry("inception", Path("t.json"), spec=spec, run=RunRecord.parse(run))

    runs = Runs()
    runs.append(entry("fork", 2, 1, [10, 10, 10, 10]))
    assert "no sequential 1×1 run of this model to compare with yet" in runs.summary_line(0)
    runs.append(entry("sequential", 1, 1, [19, 19, 19, 19]))
    runs.append(entry("fork", 2, 2, [17, 18, 19, 20]))
    assert runs.summary_line(0) == (
        "4 branches on 2 inter-op threads, 1 intra-op thread each: 1.90× faster than sequential 1×1 (#2), within noise: no"
    )
    assert runs.summary_line(2).endswith("faster than sequential 1×1 (#2), within noise: yes")
    assert "the baseline" in runs.summary_line(1)
    runs.append(entry("fork", 2, 1, [38, 38, 38, 38]))
    assert "2.00× slower than sequential 1×1" in runs.summary_line(3)
    runs.append(entry("threads", 2, 1, [10, 10, 10, 10]))  # a mode like fork, on Python threads
    assert runs.summary_line(4) == (
        "4 branches on 2 Python threads, 1 intra-op thread each: 1.90× faster than sequential 1×1 (#2), within noise: no"
    )


def test_a_fork_runs_parts_come_from_its_models_sequential_1xj_and_fork_1xj_of_its_own_sweep():
    import dataclasses

    runs = Runs()
    runs.extend([run("sequential", 50.0), run("fork", 40.0), run("fork", 25.0, threads=(2, 1)),
                 run("fork", 25.0, model="twin-mm", threads=(2, 1))])  # fmt: skip
    parts = runs.parts(2)
    assert parts is not None and (parts.plan.median, parts.parallel.median, parts.whole.median) == (1.25, 1.6, 2.0)
    assert parts.plan_by == "TorchScript's plan"  # no plan_by in its run.json: the modes registry's words
    assert runs.speedup_text(2) == "2.00× (1.25× plan × 1.60× threads)"
    assert runs.parts_text(2) == (
        "fork 2×1 over sequential 1×1, in parts: 2.00× = 1.25× from TorchScript's plan × 1.60× from 2 threads (#1 and #2)"
    )
    assert [runs.parts(k) is None for k in range(4)] == [True, True, False, True]  # twin-mm has neither run
    # A sweep cell's parts come from cells of its own sweep only.
    cell = dataclasses.replace(run("fork", 20.0, threads=(2, 1)), sweep=Path("/sweeps/a"))
    runs.append(cell)
    assert runs.parts(4) is None and runs.parts_text(4) is None
    runs.extend([dataclasses.replace(run("sequential", 40.0), sweep=Path("/sweeps/a")),
                 dataclasses.replace(run("fork", 30.0), sweep=Path("/sweeps/a"))])  # fmt: skip
    parts = runs.parts(4)
    assert parts is not None and (parts.sequential, parts.one_thread) == (5, 6) and parts.whole.median == 2.0
    assert runs.parts(2) is not None and runs.parts(2).sequential == 0  # the other runs keep their own
