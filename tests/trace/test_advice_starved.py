"""No winner from a starved measurement: the rule that says a run got, or was left, fewer cores than
its threads could use (profiling/trace/starved.py), and the advice as an object whose winner is null
and whose reason names the starved run when either run of its pair was starved."""

from __future__ import annotations

import pytest

from branchscope.profiling.trace.advice import (
    Measured,
    advice_record,
    advise,
    from_summaries,
    from_sweep,
)
from branchscope.profiling.trace.compare import RunSummary
from branchscope.profiling.trace.records import to_builtins
from branchscope.profiling.trace.starved import STARVED_SHARE, could_use, is_starved, run_threads
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.sweep_records import AdviceRecord, CellRecord, SweepRecord, WinnerRecord
from tests.trace.test_advice import steps

SEQUENTIAL, FORK = "sequential", "fork"


def test_the_threads_a_run_could_use_are_the_fewer_of_its_threads_and_the_cores():
    assert STARVED_SHARE == 0.8
    assert run_threads("sequential", 4, 2) == 2 and run_threads("threads", 2, 2) == 4
    assert run_threads("fork", 2, 1, ranks=3) == 6 and run_threads("fork", 2, 1, ranks=None) == 2
    assert run_threads(None, 2, 1) is None and run_threads("fork", None, 1) is None and run_threads("fork", 0, 1) is None
    assert could_use(2, 2) == 2 and could_use(4, 2) == 2 and could_use(1, 16) == 1 and could_use(3, None) == 3


@pytest.mark.parametrize(
    ("threads", "cores", "used", "starved"),
    [
        (2, 2, 1.6, False), (2, 2, 1.59, True),  # 0.8 × 2
        (1, 2, 0.8, False), (1, 2, 0.79, True),  # 0.8 × min(1, 2)
        (4, 2, 1.6, False), (4, 2, 1.59, True),  # oversubscribed: judged on the 2 cores it could have had
        (4, 16, 3.2, False), (4, 16, 3.19, True),
        (2, 2, 0.36, True),  # the sweep's threads 2×1 that "beat" sequential 1×2 by 4.50×
    ],
)  # fmt: skip
def test_a_run_that_got_under_0_8_of_the_cores_its_threads_could_use_is_starved(threads, cores, used, starved):
    wanted = min(threads, cores)
    waited = wanted - used  # its threads waited for a core, runnable, for the rest
    assert is_starved(threads, cores, used, None, waited) is starved
    assert is_starved(threads, cores, used, 0.0, waited) is starved  # nobody else there: only what it got counts
    assert is_starved(threads, cores, used, None, 10.0) is starved  # it wanted more than it could use: capped
    # Its threads idled instead (a model with long serial parts): it got what it wanted
    assert is_starved(threads, cores, used, 0.0, 0.0) is False
    assert is_starved(threads, cores, used, None, None) is None  # the wait unknown: "got" not judged


@pytest.mark.parametrize(
    ("threads", "cores", "others", "starved"),
    [
        (2, 2, 0.4, False), (2, 2, 0.41, True),  # left 1.6 of 2
        (2, 2, 0.03, False),  # a quiet machine's daemons never starve a run of as many threads as cores
        (1, 2, 1.2, False), (1, 2, 1.21, True),  # left 0.8 for one thread
        (4, 16, 12.8, False), (4, 16, 12.81, True),  # 16 − 12.8 = 3.2 exactly is not below 0.8 × 4
        (4, 2, 0.4, False), (4, 2, 0.41, True),  # oversubscribed by its own choice: the 2 cores it could have had
    ],
)  # fmt: skip
def test_a_run_whose_machines_load_left_it_under_0_8_of_those_cores_is_starved(threads, cores, others, starved):
    assert is_starved(threads, cores, None, others) is starved
    assert is_starved(threads, cores, float(cores), others) is starved  # it used every core: the load still counts


def test_what_is_not_measured_is_not_held_against_a_run():
    assert is_starved(2, 2, None, None) is None
    assert is_starved(2, None, None, 1.9) is None  # the cores left are unknown without the cores
    assert is_starved(2, None, 1.0, 1.9, 1.0) is True and is_starved(2, None, 1.7, None, 0.3) is False  # its own threads' 0.8


def run(mode: str, interop: int, intra: int, median: float, starved: bool = False, index: int | None = None) -> Measured:
    return Measured(mode, interop, intra, steps(median), 2, starved=starved, index=index)


def test_a_starved_run_is_never_the_winner_and_the_line_offers_a_paired_measurement():
    # The sweep of the issue: threads 2×1 got 0.36 of a core, sequential 1×2 two.
    advice = advise([run("sequential", 1, 2, 222.7), run("threads", 2, 1, 49.5, starved=True)])
    assert advice is not None and advice.winner is None and [m.label for m in advice.starved] == ["threads 2×1"]
    assert advice.text == (
        "on 2 cores, threads 2×1 (49.5 ms) and sequential 1×2 (222.7 ms) name no winner: threads 2×1 got fewer "
        "cores than its threads could use (starved); measure the two paired and interleaved: "
        "branchscope speedup --configs sequential:1x2,threads:2x1"
    )
    assert "4.50" not in advice.text and "beat" not in advice.text  # no ratio for a slide
    assert advice.reason == "starved: threads 2×1 got fewer cores than its threads could use (starved)"
    assert advice.record() == AdviceRecord(text=advice.text, winner=None, reason=advice.reason)


def test_a_starved_loser_is_no_loser_either_and_both_starved_are_named():
    advice = advise([run("sequential", 1, 2, 222.7, starved=True), run("threads", 2, 1, 49.5)])
    assert advice is not None and advice.winner is None
    assert advice.reason.startswith("starved: sequential 1×2 got fewer cores than its threads")
    both = advise([run("sequential", 1, 2, 41.0, starved=True), run("fork", 2, 1, 30.0, starved=True)])
    assert both is not None and both.winner is None
    assert both.reason == "starved: sequential 1×2 and fork 2×1 got fewer cores than their threads could use (starved)"
    assert "branchscope speedup --configs sequential:1x2,fork:2x1" in both.text


def test_the_advice_object_names_the_winner_by_configuration_and_index_or_says_why_there_is_none():
    record = advice_record([run("sequential", 1, 2, 41.0, index=0), run("fork", 2, 1, 30.0, index=3)])
    assert record is not None and record.winner == WinnerRecord(mode=FORK, interop=2, intra=1, index=3)
    assert record.text.startswith("on 2 cores, fork 2×1 (30.0 ms) beat sequential 1×2 (41.0 ms) by 1.37×")
    assert record.reason == (
        "faster: fork 2×1 by 1.37×, beyond noise (their step times' interquartile ranges do not overlap)"
    )
    assert to_builtins(record)["winner"] == {"mode": "fork", "interop": 2, "intra": 1, "index": 3}
    noise = advice_record([Measured(SEQUENTIAL, 1, 2, steps(41.5, 2.0), 2), Measured(FORK, 2, 1, steps(40.0, 2.0), 2)])
    assert noise is not None and noise.winner is None
    assert noise.reason == "within noise: their step times' interquartile ranges overlap (1.04×)"
    unpaired = advice_record([run("sequential", 1, 1, 50.0), run("fork", 2, 1, 38.0)])
    assert unpaired is not None and unpaired.winner is None and "sequential 1×2 beside it would tell" in unpaired.text
    assert unpaired.reason == "not paired: fork 2×1 computes with 2 threads, the sequential run here with 1"
    assert advice_record([run("sequential", 1, 1, 50.0), run("sequential", 1, 2, 30.0)]) is None  # one way only


def test_a_sweeps_starved_cells_and_compared_starved_runs_reach_the_advice_with_their_index():
    def cell(mode, interop, intra, ms, starved=False):
        return CellRecord(mode=mode, interop=interop, intra=intra, status="done", unprofiled_median_ms=ms,
                          unprofiled_spread_ms=[ms - 1, ms - 0.5, ms + 0.5, ms + 1], starved=starved)  # fmt: skip

    sweep = SweepRecord(cores=2, cells=[cell("sequential", 1, 1, 300.0), cell("sequential", 1, 2, 222.7),
                                        cell("threads", 2, 1, 49.5, starved=True)])  # fmt: skip
    runs = from_sweep(sweep)
    assert [(m.label, m.starved, m.index) for m in runs] == [
        ("sequential 1×1", False, 0), ("sequential 1×2", False, 1), ("threads 2×1", True, 2)]  # fmt: skip
    record = advice_record(runs)
    assert record is not None and record.winner is None and record.reason.startswith("starved: threads 2×1")
    sweep.cells[2].starved = False
    record = advice_record(from_sweep(sweep))
    assert record is not None and record.winner == WinnerRecord(mode="threads", interop=2, intra=1, index=2)

    def summary(mode, interop, intra, values, starved):
        return RunSummary(label=mode, path="", mode=mode, interop=interop, intra=intra, median_ms=None,
                          unprofiled=StepStats.of(values), parallelism=None, cores_used=None, pool_busy_share=None,
                          cores=2, starved=starved)  # fmt: skip

    summaries = [summary(None, None, None, [1.0], None), summary("fork", 2, 1, [30, 31, 32], True),
                 summary("sequential", 1, 2, [20, 21, 22], None)]  # fmt: skip
    runs = from_summaries(summaries)
    assert [(m.label, m.starved, m.index) for m in runs] == [("fork 2×1", True, 1), ("sequential 1×2", False, 2)]
    record = advice_record(runs)
    assert record is not None and record.winner is None and record.reason.startswith("starved: fork 2×1")
