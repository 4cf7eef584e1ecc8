"""Every way of opening one job gives the same per-rank figures (issue 35): its folder, its rank
files named one by one (in a shell's order: rank-10 before rank-2), read by the pool of forked
children or one file at a time, with the children finishing out of order, beside CPU burners;
through the window's loader, `open` (the window) and `inspect` (text and --json). Busy shares,
step times, memory peaks, stragglers and the heaviest rank are compared figure by figure, the
window's rank overview has a bar for every rank, and ranks are listed in rank order everywhere.

The job is small (12 ranks, 3 steps) but on kineto's epoch clock, as real traces are: the busy
shares of ranks 5 and up once overflowed int64 there when the ranks were counted merged."""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from branchscope.app import cli
from branchscope.app.pages.run_page import RunPage
from branchscope.app.trace_loader import read_sources
from branchscope.profiling.trace import merge, rank_job
from branchscope.profiling.trace.opening import read_source
from branchscope.profiling.trace.rank_job import job_of, open_rank_job
from branchscope.profiling.trace.ranks import RankFigures, figures_json, rank_figures
from tests.builders.ranks import write_rank_job

RANKS = 12
#: Kineto's clock: epoch microseconds.
EPOCH_US = 1_682_725_898_062_941


@pytest.fixture(autouse=True)
def _no_jobs_kept(monkeypatch):
    monkeypatch.setattr(rank_job, "_JOBS", type(rank_job._JOBS)())


@pytest.fixture
def burners():
    """Two processes spinning on the CPU beside the test (the machine under load)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    slow = {3: {1: 400}, 10: {2: 300}, 7: {0: 150}}
    return write_rank_job(tmp_path / "job", RANKS, steps=3, slow=slow, heavy=(5, 32 << 20), start_us=EPOCH_US)


def shell_order(folder: Path) -> list[str]:
    """The rank files as `rank-*.json` expands: by name, rank-10 before rank-2."""
    return sorted(str(p) for p in folder.glob("rank-*.json"))


def assert_same_figures(a: RankFigures, b: RankFigures) -> None:
    """Every per-rank figure of two jobs' `RankFigures` (not `first_lane`: where a rank's lanes are)."""
    assert a.ranks == b.ranks == list(range(RANKS))
    assert a.hosts == b.hosts
    assert a.steps == b.steps
    np.testing.assert_array_equal(a.step_ns, b.step_ns)
    np.testing.assert_allclose(a.busy, b.busy, rtol=1e-12)
    assert ((a.busy > 0) & (a.busy <= 1)).all()
    assert a.busy_of == b.busy_of
    np.testing.assert_array_equal(a.memory_peak, b.memory_peak)
    assert a.peaks == b.peaks
    assert a.stragglers == b.stragglers and a.heaviest == b.heaviest


def planted(f: RankFigures) -> None:
    """The figures find what the job planted."""
    assert [(s.step, s.rank) for s in f.stragglers] == [("ProfilerStep#0", 7), ("ProfilerStep#1", 3), ("ProfilerStep#2", 10)]
    assert f.heaviest is not None and f.heaviest.rank == 5


def test_the_pool_and_one_file_at_a_time_beside_cpu_burners(job, burners, monkeypatch):
    files = shell_order(job)
    merged = rank_figures(merge.load_traces(files))  # the pool (two children)
    planted(merged)
    pooled = open_rank_job(files, workers=2)
    rank_job._JOBS.clear()
    serial = open_rank_job(files, workers=1)
    assert_same_figures(pooled.figures, merged)
    assert_same_figures(serial.figures, merged)
    assert list(pooled.paths) == list(serial.paths) == [job / f"rank-{r}.json" for r in range(RANKS)]
    monkeypatch.setattr(merge, "POOL_WORKERS", lambda: 1)
    assert_same_figures(rank_figures(merge.load_traces(files)), merged)  # one file at a time, in this process


def _signal(fifo: Path) -> None:
    """Wakes the reader of `fifo` (rank 0's child), waiting for it to open its end at most 60 s: a
    blocking open would wait for ever once that reader had given up."""
    deadline = time.monotonic() + 60
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: no reader yet
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                return  # the order log then says the order was not reversed
            time.sleep(0.01)
            continue
        try:
            os.write(fd, b"1")
        finally:
            os.close(fd)
        return


def _out_of_order(load, fifo: Path):
    """`load(path)`, where rank 0's waits until the child reading rank 1 has sent it and begun
    rank 3 (the same child's next file, workers=2): results arrive in the other order than read."""

    def wrapped(path, **kwargs):
        name = Path(path).name
        if name == "rank-0.json":
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            try:
                poll = select.poll()
                poll.register(fd, select.POLLIN)
                poll.poll(60_000)  # the child's own wait, bounded: the order log then says it did not happen
            finally:
                os.close(fd)
        with open(fifo.with_suffix(".log"), "a") as log:  # rank 3 logged before it wakes rank 0: no race
            log.write(name + "\n")
        if name == "rank-3.json":
            _signal(fifo)
        return load(path, **kwargs)

    return wrapped


@pytest.mark.parametrize("way", ["summaries", "traces"])
def test_children_finishing_out_of_order_give_each_rank_its_own_figures(job, burners, monkeypatch, tmp_path, way):
    files = shell_order(job)
    expected = rank_figures(merge.merge_traces(merge.as_ranks([merge.load_source(f) for f in files])))
    fifo = tmp_path / "order.fifo"
    os.mkfifo(fifo)
    order = [job / f"rank-{r}.json" for r in range(RANKS)]  # rank 0 first, as a folder names them
    if way == "summaries":
        monkeypatch.setattr(rank_job, "load_source", _out_of_order(merge.load_source, fifo))
        opened = open_rank_job([str(p) for p in order], workers=2)
        figures = opened.figures
        assert list(opened.paths) == order
    else:
        monkeypatch.setattr(merge, "load_source", _out_of_order(merge.load_source, fifo))
        traces = merge.load_many([str(p) for p in order], workers=2)
        assert [Path(t.path).name for t in traces] == [p.name for p in order]
        figures = rank_figures(merge.merge_traces(merge.as_ranks(traces)))
    done = fifo.with_suffix(".log").read_text().split()
    assert done.index("rank-1.json") < done.index("rank-3.json") < done.index("rank-0.json")
    assert_same_figures(figures, expected)


def test_inspect_of_the_folder_and_of_its_files_agree(job, burners, capsys):
    docs, texts = [], []
    for args in ([str(job)], shell_order(job)):
        assert cli.main(["inspect", *args, "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
        assert cli.main(["inspect", *args]) == 0
        texts.append(capsys.readouterr().out.split("\n", 1)[1])  # its first line names what was opened
    folder, files = docs
    assert folder == files and texts[0] == texts[1]
    assert [m["device"] for m in files["memory"]] == [f"rank{r}/cuda:{r}" for r in range(RANKS)]
    assert [r["rank"] for r in files["ranks"]] == [r["rank"] for r in files["rank_steps"]["ranks"]] == list(range(RANKS))
    assert [r["busy"] for r in files["ranks"]] == pytest.approx([r["busy"] for r in files["rank_steps"]["ranks"]])
    window_figures = job_of(read_source(shell_order(job))).figures  # the window's summarise-all path
    assert files["rank_steps"] == figures_json(window_figures)["rank_steps"]
    assert files["stragglers"] == figures_json(window_figures)["stragglers"]
    assert files["heaviest_memory_rank"] == figures_json(window_figures)["heaviest_memory_rank"]
    assert texts[1].index("rank2/cuda:2") < texts[1].index("rank10/cuda:10")


def test_the_window_loader_opens_the_files_as_the_folder(job, burners):
    ways = {"folder": [str(job)], "files": shell_order(job)}
    opened = {name: read_sources(paths, lambda _p, _f: True) for name, paths in ways.items()}
    entries = {name: o.entries for name, o in opened.items()}
    assert all(len(e) == 1 and e[0][1] == len(ways[name]) for name, e in entries.items())
    (folder_entry, _), (files_entry, _) = entries["folder"][0], entries["files"][0]
    assert files_entry.label == folder_entry.label == f"job · {RANKS} ranks"
    assert files_entry.paths == folder_entry.paths
    folder_job, files_job = job_of(folder_entry.trace), job_of(files_entry.trace)
    assert folder_job is not None and files_job is not None
    assert_same_figures(files_job.figures, folder_job.figures)
    planted(files_job.figures)
    assert files_job.loaded(files_entry.trace) == folder_job.loaded(folder_entry.trace)
    # The recent files keep the folder: opening it again opens the same job.
    assert opened["files"].files == [str(job)] and opened["folder"].files == [str(job)]


def _overview_after_open(window, paths: list[str], qtbot=None) -> tuple:
    """What the rank overview shows once `paths` are opened (as `open` does; with `qtbot`, as the
    Open dialog, a drop and the recent files do: off the GUI thread): figures, ranks loaded, busy
    bars, rank labels."""
    if qtbot is None:
        assert window.open_trace_files(paths) == len(paths)
    else:
        with qtbot.waitSignal(window.loader.loaded, timeout=60_000):
            window.open_in_background(paths)
    o = window.page(RunPage).workspace.rank_overview
    labels = [t for _, t in o.heat.getAxis("left")._tickLevels[0]]
    return o.figures, o.loaded, list(o.busy_bars.opts["width"]), labels


def test_the_window_draws_a_busy_bar_for_every_rank_either_way(window, job, burners, qtbot):
    seen = {
        "folder": _overview_after_open(window, [str(job)]),
        "files": _overview_after_open(window, shell_order(job)),
        "files picked in the window": _overview_after_open(window, shell_order(job), qtbot),
    }
    for _figures, loaded, widths, _labels in seen.values():
        assert len(widths) == RANKS and all(0 < w <= 100 for w in widths)
        assert loaded is not None and len(loaded) == rank_job.IN_VIEW
    for way in ("files", "files picked in the window"):
        assert_same_figures(seen[way][0], seen["folder"][0])
        assert seen[way][1] == seen["folder"][1]
        assert seen[way][2] == pytest.approx(seen["folder"][2])
        assert seen[way][3] == seen["folder"][3] and any(t.startswith("●") for t in seen[way][3])
