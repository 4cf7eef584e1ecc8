"""The gap explained: a fork or threads run's regions measured in its trace against the prediction,
on built traces with known answers."""

from __future__ import annotations

import pytest

from branchscope.profiling.trace.gap import explain_gap
from tests.builders.predicted import predicted_trace as _trace


def test_a_region_measured_against_predicted_with_its_delay_stretch_and_idle_threads():
    gap = explain_gap(_trace())
    assert gap is not None and gap.threads == 2
    (region,) = gap.regions
    assert (region.region, region.region_name, region.steps) == ("1", "blocks", 2)
    assert region.predicted_ms == pytest.approx(4.0)  # a and b side by side, 4 ms each
    assert region.measured_ms == pytest.approx(6.0)  # from the main thread's last op before (1 ms) to b's end (7 ms)
    assert region.start_delay_ms == pytest.approx(0.5)  # a started on a pool thread 0.5 ms after
    assert region.branch_ms == pytest.approx(10.0) and region.sequential_ms == pytest.approx(8.0)
    assert region.stretch == pytest.approx(1.25)
    assert region.idle_ms == pytest.approx(1.0)  # 2 threads × 5.5 ms, 10 ms of it in branches
    text = gap.text()
    assert text.startswith(
        "region 1 (blocks) took 6.00 ms against 4.00 ms predicted on 2 threads: branches started 0.50 ms "
        "after the fork, ran 1.25× their sequential time, pool threads idle 1.00 ms"
    )
    assert "GIL" not in text and "profiled" not in text
    said = explain_gap(_trace(), profiler_overhead=1.3)
    assert said is not None and said.text().endswith("; measured in profiled steps, ×1.30 the unprofiled ones")
    doc = gap.to_json()
    assert doc["regions"][0]["stretch"] == 1.25 and doc["text"] == text


def test_threads_mode_says_the_gil_share_of_branch_time():
    figures = [{"tid": t, "calls": 2, "wall_ms": 10.0, "cpu_ms": 6.0, "core_wait_ms": 1.0, "gil_wait_ms": 3.0} for t in (11, 12)]
    gap = explain_gap(_trace("threads", python="3.11.7", gil=True, branch_threads=figures))
    assert gap is not None and gap.gil_wait_share == pytest.approx(0.3)
    assert "branch threads waited for the GIL 30% of their branch time" in gap.text()
    free = explain_gap(_trace("threads", gil=False, branch_threads=figures))
    assert free is not None and free.gil_wait_share is None


def test_no_gap_where_nothing_ran_side_by_side_or_nothing_was_predicted():
    assert explain_gap(_trace("sequential", interop=1)) is None
    assert explain_gap(_trace("fork", interop=1)) is None
    assert explain_gap(_trace(prediction=None)) is None  # an earlier run: no prediction
