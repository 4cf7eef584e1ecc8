"""The rank figures of a job: step times per rank and step, stragglers with their exact excess over
the step's median, the heaviest memory rank, busy shares; on generated rank folders with planted
slow steps and memory, and on the shared two-rank trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from branchscope.profiling.trace.merge import rank_summaries
from branchscope.profiling.trace.ranks import figures_json, rank_figures, straggler_line
from branchscope.profiling.trace.sources import open_job
from tests.builders.ranks import PEAK_BYTES, STEP_US, write_rank_job

TWO_RANKS = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "hta_two_ranks"


def test_planted_stragglers_and_the_heavy_rank_are_found_with_their_exact_excess(tmp_path):
    # Step 1: rank 5 is 700 µs slow, rank 2 100 µs; step 3: rank 6 is 400 µs slow. Rank 3 holds 8 MiB more.
    folder = write_rank_job(
        tmp_path / "job", 8, steps=4, slow={5: {1: 700}, 2: {1: 100}, 6: {3: 400}}, heavy=(3, 8 << 20)
    )
    f = rank_figures(open_job([str(folder)]))
    assert f.ranks == list(range(8))
    assert f.steps == [f"ProfilerStep#{n}" for n in range(4)]
    expected = np.full((8, 4), STEP_US * 1000)
    expected[5, 1] += 700_000
    expected[2, 1] += 100_000
    expected[6, 3] += 400_000
    assert (f.step_ns == expected).all()
    # Steps 0 and 2 are even: the first rank among equals, no excess.
    by_step = {s.step: s for s in f.stragglers}
    assert [(s.rank, s.excess_ns) for s in f.stragglers] == [(0, 0.0), (5, 700_000.0), (0, 0.0), (6, 400_000.0)]
    assert by_step["ProfilerStep#1"].median_ns == 1_000_000.0 and by_step["ProfilerStep#1"].step_ns == 1_700_000
    assert f.straggler_cells()[1] == (5, 1)
    heavy = f.heaviest
    assert heavy is not None and (heavy.rank, heavy.device) == (3, "cuda:3")
    assert heavy.peak_bytes == PEAK_BYTES + (8 << 20) and heavy.excess_bytes == float(8 << 20)
    assert f.peaks[0] == {"cuda:0": PEAK_BYTES}
    line = straggler_line(f)
    assert line is not None and "worst ProfilerStep#1 on rank 5" in line and "+0.700 ms" in line
    assert "heaviest memory: rank 3 (cuda:3), +8.0 MiB" in line


def test_an_even_median_and_a_rank_without_a_step(tmp_path):
    folder = write_rank_job(tmp_path / "job", 4, steps=2, slow={1: {0: 30}, 2: {0: 10}})
    trace = open_job([str(folder)])
    f = rank_figures(trace)
    # Step 0: 1000, 1030, 1010, 1000 µs: median 1005, rank 1 25 µs over it.
    s = f.stragglers[0]
    assert (s.rank, s.median_ns, s.excess_ns) == (1, 1_005_000.0, 25_000.0)
    excess = f.excess_ns()
    assert excess[1, 0] == 25_000.0 and excess[0, 0] == -5_000.0


def test_busy_shares_and_steps_agree_with_the_rank_summaries(tmp_path):
    trace = open_job([str(write_rank_job(tmp_path / "job", 3, steps=3, slow={2: {1: 500}}))])
    f = rank_figures(trace)
    summaries = rank_summaries(trace)
    assert f.busy.tolist() == pytest.approx([r.busy for r in summaries])
    assert f.busy_of == [r.busy_of for r in summaries] == ["GPU"] * 3
    assert f.memory_peak.tolist() == [r.memory_peak_bytes for r in summaries]
    assert [int(np.median(row)) for row in f.step_ns] == [r.step_ns for r in summaries]
    # Each rank's first lane is in that rank.
    assert [trace.lanes[int(k)].rank for k in f.first_lane] == [0, 1, 2]


def test_busy_shares_of_many_ranks_on_an_epoch_clock(tmp_path):
    """Kineto's times are epoch nanoseconds (~1.7e18): 12 ranks' busy shares, counted together
    on the merged trace, are each rank's own (rows lifted by the epoch overflowed int64 from rank
    5 on, and showed busy shares of ±1e9, issue 35)."""
    folder = write_rank_job(tmp_path / "job", 12, steps=2, start_us=1_682_725_898_062_941)
    trace = open_job([str(folder)])
    busy = rank_figures(trace).busy
    assert busy.tolist() == pytest.approx([r.busy for r in rank_summaries(trace)])
    assert ((busy > 0) & (busy <= 1)).all()


def test_the_json_keys(tmp_path):
    f = rank_figures(open_job([str(write_rank_job(tmp_path / "job", 3, steps=2, slow={1: {1: 250}}, heavy=(2, 1024)))]))
    doc = figures_json(f)
    assert doc["rank_steps"]["steps"] == ["ProfilerStep#0", "ProfilerStep#1"]
    assert doc["rank_steps"]["ranks"][1]["steps_us"] == [1000.0, 1250.0]
    assert doc["stragglers"][1] == {"step": "ProfilerStep#1", "rank": 1, "step_us": 1250.0, "median_us": 1000.0,
                                    "excess_us": 250.0}  # fmt: skip
    assert doc["heaviest_memory_rank"]["rank"] == 2 and doc["heaviest_memory_rank"]["excess_bytes"] == 1024
    mem = figures_json(f, memory_only=True)
    assert set(mem) == {"ranks", "heaviest_memory_rank"} and "steps_us" not in mem["ranks"][0]
    assert mem["ranks"][2]["memory_peaks"] == {"cuda:2": PEAK_BYTES + 1024}


def test_a_trace_of_one_process_is_one_rank_without_stragglers(tmp_path):
    write_rank_job(tmp_path / "job", 1, steps=2)
    f = rank_figures(open_job([str(tmp_path / "job" / "rank-0.json")]))
    assert f.ranks == [0] and f.stragglers == [] and f.heaviest is None and straggler_line(f) is None
    assert f.step_ns.shape == (1, 2)


def test_256_ranks_are_summarised(tmp_path):
    folder = write_rank_job(tmp_path / "job", 256, steps=10, slow={200: {k: 50 for k in range(10)}}, heavy=(17, 4096))
    f = rank_figures(open_job([str(folder)]))
    assert f.step_ns.shape == (256, 10)
    assert {s.rank for s in f.stragglers} == {200} and all(s.excess_ns == 50_000.0 for s in f.stragglers)
    assert f.heaviest is not None and f.heaviest.rank == 17


@pytest.mark.skipif(not TWO_RANKS.is_dir(), reason="shared traces absent")
def test_the_shared_two_rank_trace():
    trace = open_job([str(TWO_RANKS)])
    f = rank_figures(trace)
    assert f.ranks == [0, 1]
    assert f.busy_of == ["GPU", "GPU"]
    assert f.busy.tolist() == pytest.approx([r.busy for r in rank_summaries(trace)])
