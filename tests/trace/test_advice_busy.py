"""The advice names which of the two runs it compares ran on a busy machine (`advice.with_busy_note`,
from `Measured.busy`: run.json's `load.busy`, a sweep cell's `busy`): one wording for the sweep,
the Compare page and `branchscope compare`. Qt-free, no torch."""

from __future__ import annotations

from branchscope.profiling.trace.advice import (
    Measured,
    advice_record,
    from_summaries,
    from_sweep,
    with_busy_note,
)
from branchscope.profiling.trace.compare import RunSummary
from branchscope.profiling.trace.records import LoadRecord
from branchscope.profiling.trace.sweep_records import AdviceRecord, CellRecord, SweepRecord
from tests.trace.test_advice import steps

BUSY = LoadRecord(cores=2, others_cores=0.84, own_cores=0.95, own_wait_cores=0.02, busy=True)
QUIET = LoadRecord(cores=2, others_cores=0.03, own_cores=0.95, own_wait_cores=0.02, busy=False)
SEQ_WINS = "on 2 cores, sequential 1×2 (41.0 ms) beat fork 2×1 (48.0 ms) by 1.17×"


def test_the_note_names_the_busy_runs_in_the_line_and_the_reason_and_adds_nothing_without_them():
    record = AdviceRecord(text="line", reason="faster: x")
    assert with_busy_note(record, []) is record
    one = with_busy_note(record, ["sequential 1×2"])
    assert one.text == "line (sequential 1×2 ran on a busy machine: re-run it on a quiet one)"
    assert one.reason == "faster: x; sequential 1×2 ran on a busy machine: re-run it on a quiet one"
    two = with_busy_note(record, ["sequential 1×2", "fork 2×1"])
    assert two.text == "line (sequential 1×2 and fork 2×1 ran on a busy machine: re-run them on a quiet one)"
    assert record.text == "line"  # the advice given is left as it was


def _pair(seq_busy: bool, fork_busy: bool, fork_starved: bool = False) -> list[Measured]:
    return [
        Measured("sequential", 1, 1, steps(71.0), cores=2, busy=True),  # not of the pair: never named
        Measured("sequential", 1, 2, steps(41.0), cores=2, busy=seq_busy),
        Measured("fork", 2, 1, steps(48.0), cores=2, busy=fork_busy, starved=fork_starved),
    ]


def test_the_advice_names_only_the_busy_runs_of_its_pair():
    quiet = advice_record(_pair(False, False))
    assert quiet is not None and "busy" not in quiet.text and "busy" not in quiet.reason
    record = advice_record(_pair(False, True))
    assert record is not None and record.text.startswith(SEQ_WINS)
    assert record.text.endswith(" (fork 2×1 ran on a busy machine: re-run it on a quiet one)")
    assert record.reason.endswith("; fork 2×1 ran on a busy machine: re-run it on a quiet one")
    both = advice_record(_pair(True, True))
    assert both is not None and both.text.endswith("(sequential 1×2 and fork 2×1 ran on a busy machine: re-run them on a quiet one)")


def test_a_starved_run_is_named_starved_not_busy():
    record = advice_record(_pair(False, True, fork_starved=True))
    assert record is not None and "fork 2×1 got fewer cores" in record.text and "busy machine" not in record.text


def test_runs_compared_and_sweep_cells_carry_their_busy_flag():
    def summary(mode: str, interop: int, intra: int, ms: float, load: LoadRecord | None) -> RunSummary:
        return RunSummary(label=mode, path="", mode=mode, interop=interop, intra=intra, median_ms=ms, unprofiled=steps(ms),
                          parallelism=None, cores_used=None, pool_busy_share=None, cores=2, load=load)  # fmt: skip

    runs = from_summaries([summary("sequential", 1, 2, 41.0, BUSY), summary("fork", 2, 1, 48.0, QUIET),
                           summary("fork", 2, 2, 60.0, None)])  # fmt: skip
    assert [m.busy for m in runs] == [True, False, False]
    record = advice_record(runs)
    assert record is not None and record.text.endswith("(sequential 1×2 ran on a busy machine: re-run it on a quiet one)")

    def cell(mode: str, interop: int, intra: int, ms: float, busy: bool | None) -> CellRecord:
        return CellRecord(mode=mode, interop=interop, intra=intra, status="done", unprofiled_median_ms=ms, busy=busy)

    sweep = SweepRecord(cores=2, cells=[cell("sequential", 1, 2, 41.0, None), cell("fork", 2, 1, 48.0, True)])
    assert [m.busy for m in from_sweep(sweep)] == [False, True]
