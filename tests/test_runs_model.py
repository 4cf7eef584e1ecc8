"""The window's runs model without Qt: entries, the trace cache, baseline and speedup."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from branchscope.app.runs import TRACE_CACHE, Entry, Runs

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Spec:
    """What `Runs` reads of a `RunSpec` (the real one lives beside the Qt run controller)."""

    mode: str
    interop: int = 1
    intra: int = 1
    steps: int = 5
    model: str = "inception"

    @property
    def model_key(self) -> str:
        return f"demo:{self.model}"


def run(mode: str, median: float | None, model: str = "inception") -> Entry:
    return Entry(model, Path(f"/runs/{model}-{mode}/trace.json.gz"), spec=Spec(mode, model=model),
                 run={"median_ms": median} if median is not None else {})  # fmt: skip


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


def test_an_entry_names_its_files_median_and_title():
    merged = Entry("ranks 0, 1", Path("/t/rank-0.json"), more_paths=(Path("/t/rank-1.json"),))
    assert merged.paths == (Path("/t/rank-0.json"), Path("/t/rank-1.json"))
    assert merged.median_ms is None and merged.title == "ranks 0, 1"
    e = Entry("inception", Path("/r/trace.json.gz"), spec=Spec("fork", 2, 1), run={"median_ms": 20})
    assert e.median_ms == 20.0 and e.title == "inception · fork · 2×1"
    assert Entry("x", Path("/x"), run={"median_ms": "fast"}).median_ms is None


def test_speedup_is_the_models_first_sequential_median_over_this_runs():
    runs = Runs()
    runs.append(run("fork", 20.0))  # before any sequential run of its model
    runs.append(run("sequential", 40.0))
    runs.append(run("sequential", 80.0))  # a later sequential run is not the baseline
    runs.append(run("fork", 10.0))
    runs.append(run("fork", 5.0, model="lstm"))  # no sequential run of its model
    runs.append(opened("a.json"))
    runs.append(run("fork", None))  # no median
    assert [runs.baseline_of(k) for k in range(len(runs))] == [1, 1, 1, 1, None, None, 1]
    assert [runs.speedup(k) for k in range(len(runs))] == [2.0, 1.0, 0.5, 4.0, None, None, None]


def test_a_first_sequential_run_without_a_median_gives_no_speedup():
    runs = Runs()
    runs.append(run("sequential", None))
    runs.append(run("sequential", 40.0))
    runs.append(run("fork", 20.0))
    assert runs.speedup(2) is None  # as before: the first sequential run is the baseline


def test_an_explicit_baseline_is_what_every_speedup_compares_with():
    runs, seen = Runs(), Recorder()
    runs.append(run("sequential", 40.0))
    runs.append(run("fork", 20.0))
    runs.append(run("fork", 10.0))
    runs.add_observer(seen)
    assert runs.baseline is None
    runs.baseline = 1
    assert seen.calls == [("changed", 0, 2)]  # every speedup may have changed
    assert [runs.speedup(k) for k in range(3)] == [0.5, 1.0, 2.0]
    runs.baseline = None  # back to each model's first sequential run
    assert [runs.speedup(k) for k in range(3)] == [1.0, 2.0, 4.0]
    with pytest.raises(IndexError):
        runs.baseline = 3


def test_removing_entries_keeps_the_baseline_and_the_shown_entry_pointing_at_theirs():
    runs = Runs()
    for median in (40.0, 20.0, 10.0, 5.0):
        runs.append(run("fork", median))
    runs.baseline = 2
    runs.mark_shown(3)
    runs.remove(0)
    assert runs.baseline == 1 and runs[runs.baseline].median_ms == 10.0
    assert runs.current == 2 and runs.cached == [2]
    runs.remove(1)  # the baseline itself
    assert runs.baseline is None and runs.current == 1
    runs.remove(1)
    assert runs.current == -1 and runs.cached == []


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
