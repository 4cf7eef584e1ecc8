"""What the window makes of files opened together (`profiling/trace/opening.py`), without Qt: the
ranks of one job joined on one clock, snapshots opened together taken as ranks, anything else alone."""

from __future__ import annotations

import sys
from pathlib import Path

from branchscope.profiling.trace.opening import join_opened, read_source
from tests.builders import snapshots
from tests.builders.ranks import write_rank_job
from tests.builders.runs import write_small_trace


def _read(paths: list[Path]) -> list[tuple[Path, object]]:
    return [(p, read_source([p])) for p in paths]


def test_ranks_of_one_job_join_and_other_traces_stay_alone(tmp_path):
    job = write_rank_job(tmp_path / "job", ranks=2)
    alone = write_small_trace(tmp_path / "alone.json", "fork")
    opened = _read([job / "rank-0.json", alone, job / "rank-1.json"])
    joined = join_opened(opened)
    assert [j.members for j in joined] == [(0, 2), (1,)]
    ranks, single = joined
    assert ranks.ranks == (0, 1) and ranks.label == "ranks 0, 1"
    assert sorted({ln.rank for ln in ranks.trace.lanes}) == [0, 1]  # side by side on one clock
    assert single.trace is opened[1][1] and single.ranks == ()  # as read: never merged onto another clock


def test_snapshots_opened_together_are_the_ranks_of_one_job(tmp_path):
    first = snapshots.write(tmp_path / "a.pickle", snapshots.two_gpu_snapshot())
    second = snapshots.write(tmp_path / "b.pickle", snapshots.two_gpu_snapshot())
    joined = join_opened(_read([first, second]))
    assert [j.members for j in joined] == [(0, 1)] and joined[0].ranks == (0, 1)
    devices = {s.device for s in joined[0].trace.memory}
    assert any(d.startswith("rank0/") for d in devices) and any(d.startswith("rank1/") for d in devices)


def test_opening_imports_no_qt(tmp_path):
    import subprocess

    code = "import sys, branchscope.profiling.trace.opening; print('PySide6' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
