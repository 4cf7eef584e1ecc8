"""Baselines you can see (Qt-free): which run the speedups are against, said in words; runs from
disk only when the user chooses them; a sweep cell only against its own sweep; a change of baseline
said; a run beside other work never compared without saying so."""

from __future__ import annotations

from pathlib import Path

from branchscope.app.run_entry import Entry, RunSpec, entry_for_path
from branchscope.app.runs import Runs
from branchscope.app.runs_on_disk import saved_runs
from branchscope.app.runs_words import when_text
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.trace.records import RunRecord
from tests.builders.runs import write_run_folder, write_sweep_folder, write_timed_run

SEQ = [39.0, 40.0, 40.0, 41.0, 42.0]  # median 40
FORK = [19.0, 20.0, 20.0, 21.0, 22.0]  # median 20
SEQ_NEW = [24.0, 25.0, 25.0, 26.0, 27.0]  # median 25


def _run(mode: str, steps: list[float], interop: int = 1, *, busy: bool | None = None, when: float = 1e9) -> Entry:
    spec = RunSpec(mode=mode, interop=interop, intra=1, options=RunOptions(steps=5, demo="inception"))
    run = {"unprofiled_steps_ms": steps}
    if busy is not None:
        run["load"] = {"cores": 2, "others_cores": 0.9 if busy else 0.05, "busy": busy, "loadavg_start": 1.0, "loadavg_end": 1.2}
    return Entry("inception", Path(f"/runs/{mode}-{interop}/trace.json.gz"), spec=spec, run=RunRecord.parse(run), when=when)


def test_the_baseline_is_named_with_its_row_and_when_it_ran():
    runs = Runs()
    runs.extend([_run("sequential", SEQ, when=1e9), _run("fork", FORK, 2)])
    assert runs.header_text() == "speedup vs #1 sequential 1×1"
    assert runs.baseline_text(1) == (
        f"#1 sequential 1×1, run {when_text(1e9)} in this session (the model's latest sequential 1×1 run of this session)"
    )
    assert runs.speedup_text(1) == "2.00×" and runs.speedup_text(0) == "baseline"
    assert "(#1)" in runs.summary_line(1)


def test_runs_from_disk_count_only_when_chosen_and_a_session_run_takes_over(tmp_path):
    old = write_timed_run(tmp_path / "runs" / "20260101-100000-1" / "001-seq", "sequential", 1, 1, SEQ)
    runs = Runs()
    runs.extend(saved_runs(tmp_path / "runs"))
    runs.append(_run("fork", FORK, 2))
    assert runs[0].from_disk and not runs[1].from_disk
    # the old sequential 1×1 run is not used by itself: no speedup, and the column says why
    assert runs.baseline_of(1) is None and runs.speedup_text(1) == "–"
    assert runs.header_text() == "speedup (no baseline this session)"
    assert "#1 sequential 1×1 is from another session or from disk" in runs.no_baseline_text(1)
    assert runs.missing_baseline(1) is not None  # the window may run one now
    # chosen, it is used, and said to be from disk and set by the user
    runs.set_baseline(0)
    assert runs.speedup(1) == 2.0
    assert runs.baseline_text(1) is not None and runs.baseline_text(1).endswith(f"from disk ({old.name}) (set by you)")
    runs.reset_baseline()
    # a sequential 1×1 run made in this session is the default
    runs.append(_run("sequential", SEQ_NEW))
    assert runs.baseline_of(1) == 2 and runs.speedup(1) == 1.25
    # a run folder opened from disk is no default baseline either
    runs.append(entry_for_path(old))
    assert runs.baseline_of(1) == 2


def test_a_new_baseline_that_moves_other_runs_speedups_is_said():
    runs = Runs()
    said: list[str] = []
    runs.add_baseline_listener(said.append)
    runs.extend([_run("sequential", SEQ), _run("fork", FORK, 2), _run("fork", FORK, 4)])
    assert said == []  # nothing had a baseline before
    runs.append(_run("sequential", SEQ_NEW))  # the latest sequential 1×1 run: the new default
    assert said == ["speedups of 3 runs now against #4 sequential 1×1 (before: #1)"]
    assert runs.speedup(1) == 1.25
    runs.set_baseline(1)
    assert said[-1] == "speedups of 4 runs now against #2 fork 2×1 (before: #4)"
    n = len(said)
    runs.set_baseline(1)  # the same again: nothing moved, nothing said
    assert len(said) == n
    runs.reset_baseline()
    assert said[-1] == "speedups of 4 runs now against #4 sequential 1×1 (before: #2)"
    runs.remove(3)
    assert said[-1] == "speedups of 3 runs now against #1 sequential 1×1 (before: a run taken out)"


def test_a_sweep_cell_compares_only_with_its_own_sweeps_sequential_1x1_cell(tmp_path):
    sweep = write_sweep_folder(tmp_path / "sweep")
    runs = Runs()
    runs.append(_run("sequential", [80.0, 80.0, 80.0]))  # this session's, of the same model
    k = runs.append(entry_for_path(sweep / "fork-2x1"))
    assert runs[k].sweep == sweep.resolve()
    # never against the session's run (which would say 4.00×), nor any run from elsewhere
    assert runs.baseline_of(k) is None and runs.speedup(k) is None
    assert runs.no_baseline_text(k) == "no baseline: no sequential 1×1 cell of its sweep (sweep) is listed"
    assert runs.missing_baseline(k) is None  # a new run is not of that sweep
    # listing the sweep's own sequential 1×1 cell gives it its baseline (the window does this on opening a cell)
    b = runs.list_sweep_baseline(k)
    assert b == 2 and runs[b].trace_path.parent == sweep / "sequential-1x1" and runs[b].trace is None
    assert runs.baseline_of(k) == b and runs.speedup(k) == 2.0
    assert "its sweep's sequential 1×1 cell" in (runs.baseline_text(k) or "")
    assert runs.list_sweep_baseline(k) is None  # listed once
    # a baseline the user set elsewhere does not reach into the sweep; the session's runs keep theirs
    runs.set_baseline(0)
    assert runs.baseline_of(k) == b and runs.baseline_of(0) == 0
    # another sweep's sequential 1×1 cell is not this one's
    other = write_sweep_folder(tmp_path / "other")
    runs.append(entry_for_path(other / "sequential-1x1"))
    assert runs.baseline_of(k) == b


def test_a_sweep_without_a_sequential_1x1_cell_lists_nothing(tmp_path):
    sweep = write_sweep_folder(tmp_path / "sweep")
    (sweep / "sequential-1x1" / "run.json").unlink()  # an incomplete cell
    runs = Runs()
    k = runs.append(entry_for_path(sweep / "fork-2x1"))
    assert runs.list_sweep_baseline(k) is None and len(runs) == 1
    lone = write_run_folder(tmp_path / "lone", "fork", 2, 1, 20.0)
    assert runs.list_sweep_baseline(runs.append(entry_for_path(lone))) is None  # no sweep cell


def test_a_busy_run_is_never_compared_without_saying_so():
    runs = Runs()
    runs.extend([_run("sequential", SEQ, busy=False), _run("fork", FORK, 2, busy=True), _run("fork", FORK, 4, busy=False)])
    assert [e.busy for e in runs] == [False, True, False]
    assert runs.speedup_text(1) == "2.00× (machine busy)" and runs.speedup_text(2) == "2.00×"
    assert runs.busy_comparison(1) and not runs.busy_comparison(2) and not runs.busy_comparison(0)
    line = runs.summary_line(1)
    assert line.endswith("; machine busy while this run timed its steps") and line.count("machine busy") == 1
    assert runs.busy_details(1) == [
        "machine busy: this run's other processes used 0.90 of 2 cores while the steps were timed "
        "(load average 1.00 → 1.20): busy, times not comparable with a quiet run's"
    ]
    # a busy baseline makes every comparison with it say so
    runs.set_baseline(1)
    assert runs.speedup_text(0) == "0.50× (machine busy)" and runs.speedup_text(1) == "baseline (machine busy)"
    assert runs.summary_line(2).endswith("; machine busy while its baseline timed its steps")
    assert runs.busy_details(2)[0].startswith("machine busy: the baseline's other processes used 0.90")
    # both busy: said once
    runs.extend([_run("fork", FORK, 2, busy=True)])
    assert runs.summary_line(3).endswith("; machine busy while this run and its baseline timed their steps")
    assert runs.summary_line(3).count("machine busy") == 1 and len(runs.busy_details(3)) == 2
