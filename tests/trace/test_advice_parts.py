"""The advice says the parallel run's speedup in its parts (plan × threads) where the runs hold its
sequential 1×J and M 1×J, finished and not starved (profiling/trace/parts.py), in its line and its
object; never beside a starved run of the pair."""

from __future__ import annotations

import pytest

from branchscope.profiling.trace.advice import advice_record, advise, from_summaries, from_sweep
from branchscope.profiling.trace.compare import RunSummary
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.sweep_records import CellRecord, SweepRecord

TS = "TorchScript's plan"
PLANS = {"sequential": "the model's own forward", "fork": TS, "threads": "the threads plan"}


def cell(mode: str, interop: int, intra: int, ms: float | None, status: str = "done", **kw) -> CellRecord:
    spread = None if ms is None else [ms - 1.0, ms - 0.5, ms + 0.5, ms + 1.0]
    return CellRecord(mode=mode, interop=interop, intra=intra, run=f"{mode}-{interop}x{intra}", status=status,
                      median_ms=ms, unprofiled_median_ms=ms, unprofiled_spread_ms=spread, unprofiled_steps=5,
                      plan_by=PLANS[mode], **kw)  # fmt: skip


def sweep(*cells: CellRecord) -> SweepRecord:
    return SweepRecord(cores=2, nproc=1, cells=list(cells))


#: fork 2×1 (25 ms) beats sequential 1×2 (40 ms); beside sequential 1×1 (50) and fork 1×1 (40).
WINS = (cell("sequential", 1, 1, 50.0), cell("sequential", 1, 2, 40.0), cell("fork", 1, 1, 40.0),
        cell("fork", 2, 1, 25.0))  # fmt: skip
FORK_WINS = (
    "on 2 cores, fork 2×1 (25.0 ms) beat sequential 1×2 (40.0 ms) by 1.60×: forking its branches serves this "
    "model better than intra-op threads; fork 2×1 over sequential 1×1, in parts: "
    "2.00× = 1.25× from TorchScript's plan × 1.60× from 2 threads"
)


def test_the_winning_fork_cell_says_its_parts_in_the_line_and_the_object():
    record = advice_record(from_sweep(sweep(*WINS)))
    assert record is not None and record.text == FORK_WINS
    assert record.winner is not None and record.winner.index == 3
    parts = record.parts
    assert parts is not None and parts.plan_by == TS
    assert (parts.plan.median, parts.parallel.median, parts.whole.median) == (1.25, 1.6, 2.0)
    assert (parts.sequential, parts.one_thread) == (0, 2)  # cells' indexes, as the winner's
    assert parts.plan.ci95 is None


def test_within_noise_the_line_still_says_the_parts():
    cells = sweep(cell("sequential", 1, 1, 50.0), cell("sequential", 1, 2, 25.5), cell("threads", 1, 1, 55.0),
                  cell("threads", 2, 1, 25.0))  # fmt: skip
    record = advice_record(from_sweep(cells))
    assert record is not None and record.winner is None and record.reason.startswith("within noise")
    assert record.text.endswith(
        "; threads 2×1 over sequential 1×1, in parts: 2.00× = 0.91× from the threads plan × 2.20× from 2 threads"
    )
    assert record.parts is not None and record.parts.plan_by == "the threads plan"


@pytest.mark.parametrize(
    "cells",
    [
        (cell("sequential", 1, 1, 50.0), cell("sequential", 1, 2, 40.0), cell("fork", 2, 1, 25.0)),  # no fork 1×1
        (cell("sequential", 1, 2, 40.0), cell("fork", 1, 1, 40.0), cell("fork", 2, 1, 25.0)),  # no sequential 1×1
        (cell("sequential", 1, 1, 50.0), cell("sequential", 1, 2, 40.0), cell("fork", 1, 1, None, status="failed"),
         cell("fork", 2, 1, 25.0)),  # fork 1×1 failed
        (cell("sequential", 1, 1, 50.0), cell("sequential", 1, 2, 40.0), cell("fork", 1, 1, 40.0, starved=True),
         cell("fork", 2, 1, 25.0)),  # fork 1×1 starved
        (cell("sequential", 1, 1, 50.0, starved=True), cell("sequential", 1, 2, 40.0), cell("fork", 1, 1, 40.0),
         cell("fork", 2, 1, 25.0)),  # sequential 1×1 starved
    ],
)
def test_without_its_sequential_1xj_and_fork_1xj_finished_and_unstarved_no_parts(cells):
    record = advice_record(from_sweep(sweep(*cells)))
    assert record is not None and record.winner is not None and record.winner.mode == "fork"
    assert record.parts is None and "in parts" not in record.text


def test_beside_a_starved_run_of_the_pair_the_line_asks_for_a_paired_measurement_not_parts():
    cells = list(WINS)
    cells[1] = cell("sequential", 1, 2, 40.0, starved=True)
    advice = advise(from_sweep(sweep(*cells)))
    assert advice is not None and advice.parts is not None  # found, yet not said beside the starved run
    record = advice.record()
    assert record.parts is None and "in parts" not in record.text
    assert record.text.endswith("branchscope speedup --configs sequential:1x2,fork:2x1")


def test_an_earlier_sweep_without_the_plans_words_says_its_plan():
    cells = [CellRecord(**{**{f: getattr(c, f) for f in c.__struct_fields__}, "plan_by": None}) for c in WINS]
    record = advice_record(from_sweep(sweep(*cells)))
    assert record is not None and record.text.endswith("2.00× = 1.25× from its plan × 1.60× from 2 threads")


def test_compared_runs_carry_their_plans_words_into_the_advice():
    def summary(mode, interop, intra, ms):
        return RunSummary(label=mode, path="", mode=mode, interop=interop, intra=intra, median_ms=None,
                          unprofiled=StepStats.of([ms - 1, ms, ms + 1]), parallelism=None, cores_used=None,
                          pool_busy_share=None, cores=2, model="m", plan_by=PLANS[mode])  # fmt: skip

    summaries = [summary("fork", 2, 1, 25.0), summary("sequential", 1, 2, 40.0), summary("fork", 1, 1, 40.0),
                 summary("sequential", 1, 1, 50.0)]  # fmt: skip
    record = advice_record(from_summaries(summaries))
    assert record is not None and record.text == FORK_WINS
    assert record.parts is not None and (record.parts.sequential, record.parts.one_thread) == (3, 2)
