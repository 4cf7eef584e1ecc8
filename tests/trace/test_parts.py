"""The parts finder (profiling/trace/parts.py): which runs give a fork or threads run M I×J its
speedup in parts (plan × threads), from sequential 1×J and M 1×J beside it, and which get none."""

from __future__ import annotations

import pytest

from branchscope.profiling.trace.pairing import parts_text
from branchscope.profiling.trace.parts import PartRun, parts_sentence, parts_short, speedup_parts

TS = "TorchScript's plan"


def run(mode: str, interop: int, intra: int, ms: float | None, **kw) -> PartRun:
    plan_by = kw.pop("plan_by", TS if mode == "fork" else "the threads plan" if mode == "threads" else None)
    return PartRun(mode, interop, intra, ms, model=kw.pop("model", "m"), cores=kw.pop("cores", 4), plan_by=plan_by, **kw)


def medians(parts) -> tuple[float | None, ...]:
    return (parts.plan.median, parts.parallel.median, parts.whole.median)


def test_a_fork_run_beside_sequential_1xj_and_fork_1xj_splits_into_plan_and_threads():
    runs = [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)]
    found = speedup_parts(runs)
    assert found[:2] == [None, None]  # sequential and 1×J runs have no parts
    parts = found[2]
    assert parts is not None
    assert medians(parts) == (1.25, 1.6, 2.0)  # 50/40, 40/25, 50/25: the whole is plan × threads
    assert parts.plan.ci95 is None and parts.parallel.ci95 is None and parts.whole.ci95 is None  # not paired
    assert (parts.sequential, parts.one_thread) == (0, 1) and parts.plan_by == TS
    assert parts_text(parts, 2) == "2.00× = 1.25× from TorchScript's plan × 1.60× from 2 threads"
    assert parts_short(parts) == "1.25× plan × 1.60× threads"
    assert parts_sentence("fork", 2, 1, parts) == (
        "fork 2×1 over sequential 1×1, in parts: 2.00× = 1.25× from TorchScript's plan × 1.60× from 2 threads"
    )


def test_threads_mode_names_its_own_plan_and_pairs_with_its_own_1xj():
    runs = [run("threads", 1, 2, 60.0), run("sequential", 1, 2, 30.0), run("threads", 4, 2, 20.0),
            run("fork", 1, 2, 10.0)]  # fork 1×2 is not threads 4×2's one-thread run  # fmt: skip
    parts = speedup_parts(runs)[2]
    assert parts is not None and (parts.sequential, parts.one_thread) == (1, 0)
    assert medians(parts) == (0.5, 3.0, 1.5) and parts.plan_by == "the threads plan"
    assert parts_text(parts, 4) == "1.50× = 0.50× from the threads plan × 3.00× from 4 threads"


@pytest.mark.parametrize(
    "runs",
    [
        [run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)],  # no sequential 1×1
        [run("sequential", 1, 1, 50.0), run("fork", 2, 1, 25.0)],  # no fork 1×1
        [run("sequential", 1, 1, 50.0), run("threads", 1, 1, 40.0), run("fork", 2, 1, 25.0)],  # another mode's 1×1
        [run("sequential", 1, 2, 50.0), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)],  # J must match
        [run("sequential", 1, 1, 50.0), run("fork", 1, 2, 40.0), run("fork", 2, 1, 25.0)],  # J must match
        [run("sequential", 2, 1, 50.0), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)],  # sequential 1×J only
        [run("sequential", 1, 1, 50.0, model="x"), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)],  # another model
        [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0, cores=8), run("fork", 2, 1, 25.0)],  # other cores
        [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0, ranks=2), run("fork", 2, 1, 25.0)],  # other ranks
        [run("sequential", 1, 1, None), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)],  # no median
        [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 0.0), run("fork", 2, 1, 25.0)],  # no usable median
        [run("sequential", 1, 1, 50.0, starved=True), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0)],
        [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0, starved=True), run("fork", 2, 1, 25.0)],
        [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0, starved=True)],
        [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0), run("fork", 2, 1, float("nan"))],
    ],
)
def test_missing_or_unusable_runs_give_no_parts(runs):
    assert speedup_parts(runs) == [None] * len(runs)


def test_sequential_streams_and_one_thread_runs_get_none():
    runs = [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0), run("streams", 1, 1, 30.0),
            run("streams", 2, 1, 20.0), run("sequential", 2, 1, 45.0), run("fork", 2, 1, 25.0)]  # fmt: skip
    found = speedup_parts(runs)
    assert [k for k, p in enumerate(found) if p is not None] == [5]


def test_the_latest_of_several_runs_of_one_configuration_counts_and_index_names_them():
    runs = [run("sequential", 1, 1, 60.0, index=10), run("fork", 1, 1, 40.0, index=11),
            run("sequential", 1, 1, 50.0, index=12), run("fork", 2, 1, 25.0, index=13),
            run("sequential", 1, 1, 70.0, starved=True, index=14)]  # fmt: skip
    parts = speedup_parts(runs)[3]
    assert parts is not None and (parts.sequential, parts.one_thread) == (12, 11)  # the starved one never counts
    assert medians(parts) == (1.25, 1.6, 2.0)


def test_without_the_modes_words_the_plan_is_its_plan():
    runs = [run("sequential", 1, 1, 50.0), run("fork", 1, 1, 40.0), run("fork", 2, 1, 25.0, plan_by=None)]
    parts = speedup_parts(runs)[2]
    assert parts is not None and parts_text(parts, 2) == "2.00× = 1.25× from its plan × 1.60× from 2 threads"
