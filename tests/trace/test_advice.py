"""Advice: which way of using the cores (intra-op threads, or forking the branches) served a model
better, from runs of the same thread count, within noise as step_stats judges it."""

from __future__ import annotations

import pytest

from branchscope.profiling.trace.advice import (
    Measured,
    advice_line,
    advise,
    from_summaries,
    from_sweep,
    missing_text,
)
from branchscope.profiling.trace.compare import RunSummary
from branchscope.profiling.trace.starved import threads
from branchscope.profiling.trace.step_stats import StepStats
from branchscope.profiling.trace.sweep_records import CellRecord, SweepRecord

SEQUENTIAL, FORK, THREADS = "sequential", "fork", "threads"


def steps(median: float, half_iqr: float = 0.5) -> StepStats:
    """Step times around `median` whose interquartile range is median ± half_iqr."""
    s = StepStats.of(
        [median - 2 * half_iqr, median - half_iqr, median, median + half_iqr, median + 2 * half_iqr]
    )
    assert s is not None and s.median == median
    assert (s.q1, s.q3) == pytest.approx((median - half_iqr, median + half_iqr))
    return s


def run(
    mode: str, interop: int, intra: int, median: float, cores: int | None = 2, half_iqr: float = 0.5
) -> Measured:
    return Measured(mode, interop, intra, steps(median, half_iqr), cores)


def test_threads_of_sequential_are_its_intra_op_team_and_of_fork_the_pool_times_the_team():
    assert threads(SEQUENTIAL, 1, 2) == 2
    assert threads(SEQUENTIAL, 4, 2) == 2  # sequential hands nothing to the inter-op pool
    assert threads(FORK, 2, 1) == 2
    assert threads(FORK, 2, 2) == 4
    assert Measured(FORK, 2, 1, steps(10), ranks=2).threads == 4


def test_sequential_with_intra_op_threads_beating_fork_says_so_in_one_line():
    advice = advise([run("sequential", 1, 2, 41.0), run("fork", 2, 1, 48.3), run("sequential", 1, 1, 70.0)])
    assert advice is not None
    assert (advice.faster, advice.threads, advice.cores) == (SEQUENTIAL, 2, 2)
    assert advice.ratio == pytest.approx(48.3 / 41.0)
    assert advice.text == (
        "on 2 cores, sequential 1×2 (41.0 ms) beat fork 2×1 (48.3 ms) by 1.18×: "
        "intra-op threads serve this model better than forking its branches"
    )


def test_fork_beating_sequential_says_the_reverse():
    advice = advise([run("sequential", 1, 2, 41.0), run("fork", 2, 1, 30.0)])
    assert advice is not None and advice.faster == FORK
    assert advice.text == (
        "on 2 cores, fork 2×1 (30.0 ms) beat sequential 1×2 (41.0 ms) by 1.37×: "
        "forking its branches serves this model better than intra-op threads"
    )


def test_overlapping_interquartile_ranges_are_within_noise():
    seq, fork = run("sequential", 1, 2, 41.5, half_iqr=2.0), run("fork", 2, 1, 40.0, half_iqr=2.0)
    assert seq.stats.within_noise(fork.stats)  # the rule of step_stats, reused
    advice = advise([seq, fork])
    assert advice is not None and advice.faster is None
    assert advice.text.startswith(
        "on 2 cores, fork 2×1 (40.0 ms) and sequential 1×2 (41.5 ms) are within noise (1.04×"
    )
    assert "neither intra-op threads nor forking its branches served this model clearly better" in advice.text
    # The same medians with tight spreads are a verdict.
    assert (
        advise([run("sequential", 1, 2, 41.0, half_iqr=0.1), run("fork", 2, 1, 40.0, half_iqr=0.1)]).faster
        == FORK
    )


def test_runs_of_different_thread_counts_are_not_compared_and_say_which_run_would_tell():
    runs = [
        run("sequential", 1, 1, 50.0),
        run("fork", 2, 1, 38.0),
    ]  # fork 1.32× faster, with twice the threads
    assert advise(runs) is None
    text = missing_text(runs)
    assert text is not None and advice_line(runs) == text
    assert "fork 2×1 computes with 2 threads, the sequential run here with 1" in text
    assert "sequential 1×2 beside it would tell" in text


def test_sequential_with_idle_inter_op_threads_is_not_paired_with_fork_of_as_many_inter_op_threads():
    assert advise([run("sequential", 2, 1, 50.0), run("fork", 2, 1, 30.0)]) is None


def test_fork_on_one_pool_thread_forks_nothing_in_parallel_and_is_not_paired():
    runs = [run("sequential", 1, 2, 41.0), run("fork", 1, 2, 30.0)]
    assert advise(runs) is None
    assert missing_text(runs) is None  # no run forks branches side by side: nothing to tell
    assert (
        advice_line([run("sequential", 1, 1, 1.0, half_iqr=0.1), run("sequential", 1, 2, 0.8, half_iqr=0.1)])
        is None
    )


def test_the_fastest_of_each_way_at_the_cores_thread_count_is_paired():
    runs = [
        run("sequential", 1, 2, 41.0, cores=4), run("sequential", 2, 2, 40.0, cores=4),
        run("sequential", 1, 4, 30.0, cores=4), run("fork", 2, 1, 35.0, cores=4),
        run("fork", 4, 1, 26.0, cores=4), run("fork", 2, 2, 24.0, cores=4),
    ]  # fmt: skip
    advice = advise(runs)
    assert advice is not None and advice.threads == 4
    assert (advice.sequential.label, advice.parallel.label) == ("sequential 1×4", "fork 2×2")
    assert advice.text.endswith("forking its branches serves this model better than intra-op threads alone")
    # At 2 threads the fastest sequential run is 2×2 (its inter-op threads idle): the pair is 2×2 vs 2×1.
    two = advise([r for r in runs if r.threads == 2])
    assert two is not None and (two.sequential.label, two.parallel.label, two.threads) == (
        "sequential 2×2",
        "fork 2×1",
        2,
    )
    assert two.text.startswith("with 2 threads on 4 cores, ")


def test_thread_count_up_to_the_cores_is_preferred_then_oversubscribed_says_so():
    runs = [run("sequential", 1, 2, 41.0), run("fork", 2, 1, 48.0), run("sequential", 1, 4, 60.0),
            run("fork", 4, 1, 20.0)]  # fmt: skip
    advice = advise(runs)
    assert advice is not None and advice.threads == 2 and advice.faster == SEQUENTIAL
    over = advise(runs[2:])
    assert over is not None and over.threads == 4
    assert over.text.startswith(
        "with 4 threads on 2 cores, fork 4×1 (20.0 ms) beat sequential 1×4 (60.0 ms) by 3.00×"
    )


def test_runs_of_another_machine_are_left_out_and_unknown_cores_say_threads():
    runs = [run("sequential", 1, 2, 41.0), run("fork", 2, 1, 48.0), run("fork", 2, 1, 10.0, cores=8)]
    advice = advise(runs)
    assert advice is not None and advice.parallel.stats.median == 48.0
    unknown = advise([run("sequential", 1, 2, 41.0, cores=None), run("fork", 2, 1, 48.0, cores=None)])
    assert unknown is not None and unknown.text.startswith("with 2 threads, sequential 1×2 (41.0 ms) beat")


def test_small_step_times_keep_three_significant_digits():
    advice = advise(
        [run("sequential", 1, 2, 0.583, half_iqr=0.001), run("fork", 2, 1, 0.712, half_iqr=0.001)]
    )
    assert advice is not None
    assert "sequential 1×2 (0.583 ms) beat fork 2×1 (0.712 ms) by 1.22×" in advice.text


def _cell(mode, interop, intra, median, spread=None, status="done"):
    return CellRecord(mode=mode, interop=interop, intra=intra, run=f"{mode}-{interop}x{intra}", status=status,
                      median_ms=median, unprofiled_median_ms=median, unprofiled_spread_ms=spread, unprofiled_steps=5)  # fmt: skip


def test_a_sweeps_finished_cells_are_read_with_their_spread_and_cores():
    sweep = SweepRecord(cores=2, nproc=1, cells=[
        _cell("sequential", 1, 1, 70.0, [68.0, 69.0, 71.0, 75.0]),
        _cell("sequential", 1, 2, 41.0, [40.0, 40.5, 41.5, 44.0]),
        _cell("fork", 2, 1, 48.3, [47.0, 48.0, 49.0, 52.0]),
        _cell("fork", 2, 2, None, status="failed"),
    ])  # fmt: skip
    runs = from_sweep(sweep)
    assert [(m.label, m.cores, m.spread_known) for m in runs] == [
        ("sequential 1×1", 2, True), ("sequential 1×2", 2, True), ("fork 2×1", 2, True)]  # fmt: skip
    assert runs[1].stats.spread == (40.0, 40.5, 41.5, 44.0) and runs[1].stats.n == 5
    assert advice_line(runs) == (
        "on 2 cores, sequential 1×2 (41.0 ms) beat fork 2×1 (48.3 ms) by 1.18×: "
        "intra-op threads serve this model better than forking its branches"
    )


def test_cells_without_a_spread_are_compared_on_medians_and_the_line_says_so():
    sweep = SweepRecord(cores=2, cells=[_cell("sequential", 1, 2, 41.0), _cell("fork", 2, 1, 41.5)])
    advice = advise(from_sweep(sweep))
    assert advice is not None and not advice.noise_known and advice.faster == SEQUENTIAL
    assert advice.text.endswith("(no spread to judge noise by: medians alone)")


def test_compared_runs_are_read_from_their_summaries():
    def summary(mode, interop, intra, values, cores=2):
        return RunSummary(label=mode, path="", mode=mode, interop=interop, intra=intra, median_ms=None,
                          unprofiled=StepStats.of(values), parallelism=None, cores_used=None, pool_busy_share=None,
                          cores=cores)  # fmt: skip

    summaries = [summary("sequential", 1, 1, [50, 51, 52]), summary("fork", 2, 1, [30, 31, 32]),
                 summary("sequential", 1, 2, [20, 21, 22]), summary(None, None, None, [1, 2])]  # fmt: skip
    runs = from_summaries(summaries)
    assert [m.label for m in runs] == ["sequential 1×1", "fork 2×1", "sequential 1×2"]
    advice = advise(runs)
    assert advice is not None and advice.faster == SEQUENTIAL and advice.ratio == pytest.approx(31 / 21)


def test_the_modes_advice_pairs_are_the_registered_modes_whose_traits_run_a_branch_pool():
    from branchscope.profiling.run.modes import MODES

    assert MODES[FORK].starts_interop_pool and not MODES[SEQUENTIAL].starts_interop_pool
    assert MODES[THREADS].starts_interop_pool
    # The modes advice pairs with sequential are every registered mode with a pool of threads of its own.
    pools = {name for name, m in MODES.items() if m.traits.branch_pool}
    assert {FORK, THREADS} <= pools and pools == {name for name, m in MODES.items() if m.starts_interop_pool}
    assert {m.mode for m in (run(name, 2, 1, 10.0) for name in MODES) if m.forks} == pools


def test_threads_runs_count_their_pool_times_the_team_and_are_paired_like_fork():
    assert threads(THREADS, 2, 1) == 2 and threads(THREADS, 2, 2) == 4
    advice = advise([run("sequential", 1, 2, 41.0), run("threads", 2, 1, 30.0)])
    assert advice is not None and advice.faster == THREADS and advice.parallel.label == "threads 2×1"
    assert advice.text == (
        "on 2 cores, threads 2×1 (30.0 ms) beat sequential 1×2 (41.0 ms) by 1.37×: "
        "running its branches on Python threads serves this model better than intra-op threads"
    )
    lost = advise([run("sequential", 1, 2, 41.0), run("threads", 2, 1, 48.3)])
    assert lost is not None and lost.text.endswith(
        "intra-op threads serve this model better than running its branches on Python threads"
    )
    noise = advise([run("sequential", 1, 2, 41.5, half_iqr=2.0), run("threads", 2, 1, 40.0, half_iqr=2.0)])
    assert noise is not None and noise.faster is None
    assert "neither intra-op threads nor running its branches on Python threads" in noise.text
    assert advise([run("sequential", 1, 2, 41.0), run("threads", 1, 2, 30.0)]) is None  # one pool thread


def test_the_fastest_of_fork_and_threads_is_paired_and_named():
    runs = [run("sequential", 1, 2, 41.0), run("fork", 2, 1, 35.0), run("threads", 2, 1, 38.0)]
    advice = advise(runs)
    assert advice is not None and (advice.faster, advice.parallel.label) == (FORK, "fork 2×1")
    advice = advise([*runs[:2], run("threads", 2, 1, 31.0)])
    assert advice is not None and (advice.faster, advice.parallel.label) == (THREADS, "threads 2×1")
    missing = missing_text([run("sequential", 1, 1, 50.0), run("threads", 2, 1, 38.0)])
    assert missing is not None and "threads 2×1 computes with 2 threads" in missing
    assert missing.endswith("whether intra-op threads or running its branches on Python threads serve it better")


def test_runs_of_another_model_are_never_paired():
    seq = Measured(SEQUENTIAL, 1, 2, steps(41.0), 2, model="demo inception")
    forks = [Measured(FORK, 2, 1, steps(30.0), 2, model="demo twin-mm"),
             Measured(FORK, 2, 1, steps(48.0), 2, model="demo inception"),
             Measured(SEQUENTIAL, 1, 1, steps(60.0), 2, model="demo inception")]  # fmt: skip
    advice = advise([seq, *forks])
    assert advice is not None and advice.parallel.stats.median == 48.0 and advice.faster == SEQUENTIAL
