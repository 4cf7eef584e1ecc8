"""What the window makes of files opened together (`profiling/trace/opening.py`), without Qt: the
ranks of one job joined on one clock, snapshots opened together taken as ranks, anything else alone."""

from __future__ import annotations

import sys
from pathlib import Path

from branchscope.profiling.trace import opening, rank_job
from branchscope.profiling.trace.opening import gather, join_opened, read_source, recalled_as
from branchscope.profiling.trace.rank_job import ALL_RANKS_UP_TO, job_of
from branchscope.profiling.trace.sources import open_source
from tests.builders import snapshots
from tests.builders.ranks import write_rank_job
from tests.builders.runs import write_run_folder, write_small_trace


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


def test_rank_files_of_a_large_job_gather_into_their_folders_source(tmp_path, monkeypatch):
    """Picked one by one (in a shell's order) among other files, the ranks of a job of more than
    ALL_RANKS_UP_TO ranks are one source, their folder's; read, they open as the folder does."""
    monkeypatch.setattr(rank_job, "_JOBS", type(rank_job._JOBS)())
    job = write_rank_job(tmp_path / "job", ranks=ALL_RANKS_UP_TO + 2)
    alone = write_small_trace(tmp_path / "alone.json", "fork")
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [')
    picked = [alone, *sorted(job.glob("rank-*.json")), broken]
    sources = [open_source(p) for p in picked]
    gathered = gather(sources)
    assert [members for members, _ in gathered] == [(0,), tuple(range(1, len(picked) - 1)), (len(picked) - 1,)]
    source = gathered[1][1]
    assert source == open_source(job)  # the folder's own source: its files in rank order
    assert gathered[0][1] is sources[0] and gathered[2][1] is sources[-1]
    folder_job = job_of(read_source(open_source(job).traces))
    assert folder_job is not None and job_of(read_source(source.traces)) is folder_job  # summarised once
    assert recalled_as(source, [sources[k].path for k in gathered[1][0]]) == [job]
    assert recalled_as(sources[0], [alone]) == [alone]


def test_run_folders_opened_together_are_never_summarised_as_ranks(tmp_path, monkeypatch):
    """Only trace files picked one by one can be a job's ranks: nine run folders (`open runs/*/`)
    are each read once, never summarised first (`large_jobs` read every trace twice)."""

    def summarised(*_args, **_kwargs):
        raise AssertionError("run folders were summarised as ranks")

    monkeypatch.setattr(opening, "large_jobs", summarised)
    sources = [open_source(write_run_folder(tmp_path / f"run{k}", "fork", 2, 1, 20.0)) for k in range(ALL_RANKS_UP_TO + 1)]
    assert gather(sources) == [((k,), s) for k, s in enumerate(sources)]


def test_a_few_rank_files_are_read_and_joined_in_rank_order(tmp_path):
    job = write_rank_job(tmp_path / "job", ranks=ALL_RANKS_UP_TO)
    sources = [open_source(p) for p in sorted(job.glob("rank-*.json"), reverse=True)]  # named last rank first
    assert [members for members, _ in gather(sources)] == [(k,) for k in range(len(sources))]
    joined = join_opened([(s.path, read_source(s.traces)) for s in sources])
    assert len(joined) == 1 and joined[0].ranks == tuple(range(ALL_RANKS_UP_TO))
    assert [m.rank for m in joined[0].trace.memory] == list(range(ALL_RANKS_UP_TO))


def test_opening_imports_no_qt(tmp_path):
    import subprocess

    code = "import sys, branchscope.profiling.trace.opening; print('PySide6' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
