"""Distributed runs (`--nproc N`): torch.distributed.run starts the ranks, each is a worker with its
own trace and CPU samples; a rank that raises, dies or hangs ends the run naming it, and nothing
the run started is left running, the runner's own death included."""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from branchscope.app import cmd_memory, cmd_profile
from branchscope.app.runs import entry_for_path
from branchscope.profiling.run.launch import launcher_command
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.outcome import RunResult
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.run.runner import run_profile
from branchscope.profiling.trace.events import ErrorEvent, ExitedEvent, PhaseEvent
from branchscope.profiling.trace.records import RunRecord
from tests.paths import ROOT
from tests.processes import mentioning, wait_until
from tests.run.slow_first_calls import write_slow_first_calls

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="branchscope")
    sub = parser.add_subparsers(dest="command")
    cmd_profile.register(sub)
    cmd_memory.register(sub)
    args = parser.parse_args(argv)
    return int(args.handler(args))


def _nothing_left(*texts: str) -> None:
    wait_until(lambda: not any(mentioning(t) for t in texts), 30, f"no process mentioning {texts}")


#: A model whose train_step runs DDP (a collective every step) and misbehaves on rank 1 as BEHAVE
#: says; every rank first starts a child process carrying MARKER, which must not outlive the run.
_MODEL = """
import os, signal, subprocess, sys, time
import torch
import torch.distributed as dist
from torch import nn

BEHAVE = {behave!r}
MARKER = {marker!r}


def build_model():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARKER])
    assert dist.is_initialized()  # the process group exists before build_model()
    return nn.Linear(8, 8)


def example_inputs():
    return (torch.randn(4, 8),)


_ddp = {{}}


def train_step(model, inputs):
    ddp = _ddp.setdefault(id(model), nn.parallel.DistributedDataParallel(model))
    if dist.get_rank() == 1:
        if BEHAVE == "raise":
            raise ValueError("rank one fails")
        if BEHAVE == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if BEHAVE == "hang":
            time.sleep(600)
    ddp(*inputs).sum().backward()
"""


def _model(tmp_path: Path, behave: str) -> tuple[Path, str]:
    marker = f"branchscope-test-{uuid.uuid4().hex}"
    path = tmp_path / f"{behave}.py"
    path.write_text(_MODEL.format(behave=behave, marker=marker))
    return path, marker


def _request(model: Path, out: Path, nproc: int = 2, timeout: float = 600.0) -> RunRequest:
    return RunRequest(mode="sequential", interop=1, intra=1, out=out, options=RunOptions(model=model, steps=2, warmup=1, nproc=nproc, timeout=timeout))


def _run_ranks(tmp_path: Path, behave: str, timeout: float = 600.0) -> tuple[RunResult, str, Path]:
    """A two-rank run of the model whose rank 1 does `behave`: its result, the marker its
    processes carry, its --out."""
    model, marker = _model(tmp_path, behave)
    out = tmp_path / "out"
    return run_profile(_request(model, out, timeout=timeout)), marker, out


def test_the_launcher_is_torch_distributed_run_on_loopback(tmp_path):
    cmd = launcher_command(_request(tmp_path / "m.py", tmp_path / "out"), tmp_path / "out")
    at = cmd.index("torch.distributed.run")
    assert cmd[at - 1] == "-m" and "branchscope.profiling.run.processes" in cmd[:at]
    launcher = cmd[at:]
    assert launcher[launcher.index("--nproc-per-node") + 1] == "2"
    assert "--standalone" in launcher and launcher[launcher.index("--local-addr") + 1] == "127.0.0.1"
    assert launcher[launcher.index("--max-restarts") + 1] == "0"
    assert launcher[launcher.index("--no-python") + 2 :][:3] == [sys.executable, "-I", "-m"]


def test_nproc_below_one_is_refused(tmp_path):
    result = run_profile(_request(tmp_path / "m.py", tmp_path / "out", nproc=0))
    assert result.exit_code == 2 and result.message == "--nproc must be at least 1, not 0"


@pytest.mark.slow
def test_ddp_gather_loss_on_two_ranks_writes_each_rank_and_rank_0_peaks_higher(tmp_path, capsys):
    out = tmp_path / "D"
    argv = ["profile", "--demo", "ddp-gather-loss", "--nproc", "2", "--mode", "sequential", "--interop", "1",
            "--intra", "1", "--steps", "2", "--warmup", "1", "--out", str(out)]  # fmt: skip
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "2 ranks (gloo)" in printed and "rank 1 (pid" in printed
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is True and run["nproc"] == 2 and run["backend"] == "gloo" and run["train_step"] is True
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert [r["device"] for r in run["ranks"]] == ["cpu", "cpu"]
    assert len({r["pid"] for r in run["ranks"]}) == 2
    for r in (0, 1):
        rank_run = json.loads((out / f"rank-{r}" / "run.json").read_text())
        assert rank_run["rank"] == r and rank_run["world_size"] == 2 and rank_run["pid"] == run["ranks"][r]["pid"]
        trace = json.loads(gzip.decompress((out / f"rank-{r}" / "trace.json.gz").read_bytes()))
        assert trace["distributedInfo"]["rank"] == r and trace["branchscope"]["rank"] == r
        assert any(e.get("cat") == "cpu_sample" for e in trace["traceEvents"])
        assert "rank-0/trace.json.gz" in run["files"] and f"rank-{r}/run.json" in run["files"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging, no events files
    assert [p.name for p in entry_for_path(out).paths] == ["trace.json.gz", "trace.json.gz"]

    assert cli(["memory", "--json", str(out)]) == 0
    peaks = {d["rank"]: d["peak_bytes"] for d in json.loads(capsys.readouterr().out)["devices"]}
    assert peaks[0] > 1.5 * peaks[1]

    # A second run on the same folder replaces the ranks' folders it wrote.
    assert cli(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["rank-0", "rank-1", "run.json", "worker.log"]


@pytest.mark.slow
def test_ranks_warm_up_together_until_the_last_to_settle_has(tmp_path):
    slow_calls = 12
    # rank 1 is slow for its first calls; rank 0 is quick from the first. No collective in the step:
    # only the warm-up's own agreement ties the ranks.
    model = write_slow_first_calls(tmp_path / "rank_one_warms_up.py", slow_calls, slow_rank=1)
    out = tmp_path / "out"
    result = run_profile(_request(model, out))  # --warmup 1
    assert result.ok, result.message
    ranks = [json.loads((out / f"rank-{r}" / "run.json").read_text()) for r in (0, 1)]
    # rank 0, quick from the first, would have settled after two windows on its own: it waited for rank 1
    assert ranks[0]["warmup_steps"] == ranks[1]["warmup_steps"] >= slow_calls
    assert ranks[0]["warmup_settled"] is True and ranks[1]["warmup_settled"] is True
    top = json.loads((out / "run.json").read_text())
    assert (top["warmup_steps"], top["warmup_settled"], top["warmup_cap"]) == (ranks[0]["warmup_steps"], True, None)
    # the ranks' warnings, then the machine's load once for the run (the runner measures it for all ranks)
    busy = [w for w in top["warnings"] if w.startswith("other processes used")]
    assert top["warnings"] == [f"rank {r}: {w}" for r in (0, 1) for w in ranks[r]["warnings"]] + busy
    assert len(busy) == (1 if top["load"]["busy"] else 0) and 0 <= top["load"]["others_cores"] <= top["load"]["cores"]


@pytest.mark.slow
def test_ddp_local_loss_keeps_the_ranks_peaks_within_15_percent(tmp_path, capsys):
    out = tmp_path / "D"
    assert cli(["profile", "--demo", "ddp-local-loss", "--nproc", "2", "--mode", "sequential", "--interop", "1",
                "--intra", "1", "--steps", "2", "--warmup", "1", "--out", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    assert cli(["memory", "--json", str(out)]) == 0
    peaks = [d["peak_bytes"] for d in json.loads(capsys.readouterr().out)["devices"]]
    assert len(peaks) == 2 and max(peaks) <= 1.15 * min(peaks)


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_run_with_exit_2_naming_it_and_its_traceback(tmp_path):
    result, marker, out = _run_ranks(tmp_path, "raise")
    assert result.exit_code == 2
    assert result.message == "rank 1: train_step raised ValueError while warming up: rank one fails"
    assert result.traceback and "raise ValueError(\"rank one fails\")" in result.traceback
    _nothing_left(marker, str(out))
    assert not out.exists()  # a failed first run leaves no folder behind


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_with_exit_4_naming_it_and_the_signal(tmp_path):
    result, marker, out = _run_ranks(tmp_path, "kill")
    assert result.exit_code == 4
    assert result.message and result.message.startswith("rank 1 (pid ")
    assert result.message.endswith("died (killed by SIGKILL) before writing its results")
    _nothing_left(marker, str(out))


@pytest.mark.slow
def test_a_hanging_rank_ends_the_run_with_exit_4_at_the_timeout(tmp_path):
    result, marker, out = _run_ranks(tmp_path, "hang", timeout=20.0)
    assert result.exit_code == 4
    assert result.message and result.message.startswith("the run ran past --timeout 20 s and was stopped; rank(s) ")
    _nothing_left(marker, str(out))


@pytest.mark.slow
def test_killing_the_runner_outright_takes_every_rank_and_what_they_started(tmp_path):
    model, marker = _model(tmp_path, "hang")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "branchscope.profiling.run.runner", *_request(model, out).argv(), "--jsonl"]
    runner = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(mentioning(marker)) == 2, 120, "both ranks' child processes")
        assert mentioning("torch.distributed.run")
        runner.kill()  # no cleanup of its own: death signals and the ranks' reapers must do it
        runner.wait(timeout=60)
        _nothing_left(marker, str(out))
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for p in mentioning(marker) + mentioning(str(out)):
            p.kill()


def test_the_processes_control_asks_for_ranks_when_run_is_pressed(qtbot, tmp_path):
    from PySide6.QtCore import Qt

    from branchscope.app.run_controls import RunControls
    from branchscope.profiling.run.model_source import list_demos

    controls = RunControls(list_demos(), cores=2)
    qtbot.addWidget(controls)
    controls.show()
    qtbot.waitExposed(controls)
    assert controls.spec().options.nproc == 1 and "--nproc" not in controls.spec().runner_arguments(tmp_path)
    asked: list = []
    controls.runRequested.connect(asked.append)
    controls.nproc_spin.setFocus()
    qtbot.keyClick(controls.nproc_spin, Qt.Key.Key_Up)
    assert asked == []  # moving a control runs nothing
    controls.run_button.click()
    assert [spec.options.nproc for spec in asked] == [2]
    args = asked[0].runner_arguments(tmp_path)
    assert args[args.index("--nproc") + 1] == "2"
    controls.set_values(nproc=3)
    assert controls.spec().options.nproc == 3


def test_a_distributed_run_json_repeats_and_reads_as_its_ranks(tmp_path):
    from branchscope.app.run_controller import FinishedRun
    from branchscope.app.runs import RunSpec
    from branchscope.profiling.trace.sources import complete_run

    raw = {
        "mode": "sequential", "interop": 1, "intra": 1, "model": "demo ddp-gather-loss", "source": "demo",
        "steps": 2, "warmup": 1, "nproc": 2, "complete": True, "trace": "rank-0/trace.json.gz",
        "ranks": [{"rank": 0, "trace": "rank-0/trace.json.gz"}, {"rank": 1, "trace": "rank-1/trace.json.gz"}],
    }  # fmt: skip
    run = RunRecord.parse(raw)
    spec = RunSpec.from_record(run)
    assert spec == RunSpec(mode="sequential", interop=1, intra=1, options=RunOptions(steps=2, warmup=1, demo="ddp-gather-loss", nproc=2))
    finished = FinishedRun(spec, tmp_path, run)
    assert finished.paths == (tmp_path / "rank-0/trace.json.gz", tmp_path / "rank-1/trace.json.gz")
    assert finished.trace_path == tmp_path / "rank-0/trace.json.gz"
    (tmp_path / "run.json").write_text(json.dumps(raw))
    (tmp_path / "rank-0").mkdir()
    (tmp_path / "rank-0" / "trace.json.gz").write_bytes(b"")
    assert complete_run(tmp_path) is None  # rank 1's trace is missing: no complete run
    (tmp_path / "rank-1").mkdir()
    (tmp_path / "rank-1" / "trace.json.gz").write_bytes(b"")
    assert complete_run(tmp_path) == run
    escaping = dict(raw, ranks=[{"rank": 0, "trace": "rank-0/../../etc/passwd"}])
    (tmp_path / "run.json").write_text(json.dumps(escaping))
    assert complete_run(tmp_path) is None


def test_the_first_failure_is_a_rank_killed_before_any_rank_exited_with_an_error():
    from branchscope.profiling.run.supervise import Rank, first_to_fail

    killed = Rank(1, pid=11, exited=ExitedEvent(code=-9, t=10.0), failed_at=10.0)
    # rank 0 saw its peer vanish in a collective: an error, reported about when rank 1 died
    broken = Rank(0, pid=10, error=ErrorEvent(message="Connection closed by peer"), exited=ExitedEvent(code=2, t=10.2),
                   failed_at=9.99)  # fmt: skip
    assert first_to_fail([broken, killed]) is killed
    # a rank raised and exited 2; the launcher then stopped the other with SIGTERM
    raised = Rank(1, error=ErrorEvent(message="boom"), exited=ExitedEvent(code=2, t=5.0), failed_at=4.9)
    stopped = Rank(0, exited=ExitedEvent(code=-15, t=5.3), failed_at=5.3)
    assert first_to_fail([stopped, raised]) is raised
    assert first_to_fail([Rank(0, finished=True), Rank(1, finished=True)]) is None
    # at a timeout (20.0) the runner stops the ranks itself: what dies after it is no failure
    hung = Rank(0, pid=10, ended=20.3, failed_at=20.3)
    assert first_to_fail([hung], before=20.0) is None and first_to_fail([hung]) is hung
    assert first_to_fail([hung, killed], before=20.0) is killed
    # rank 1's process under the launcher was killed; the launcher then stopped rank 0's group, and
    # rank 0's reaper, woken by that signal, wrote first: rank 1's, woken by its parent's death, later
    died = Rank(1, pid=11, ended=31.0, failed_at=31.0)
    told = Rank(0, pid=10, ended=30.5, stopped=True, failed_at=30.5)
    assert first_to_fail([told, died]) is died
    assert first_to_fail([told]) is told  # stopped, and nobody else failed: still named


def test_a_rank_folder_branchscope_did_not_write_is_never_replaced(tmp_path):
    from branchscope.profiling.run.folder import RunFolder, RunFolderError

    (tmp_path / "rank-0").mkdir()
    (tmp_path / "rank-0" / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match=r"holds files branchscope did not write \(rank-0\)"):
        RunFolder(tmp_path).open()
    with RunFolder(tmp_path, overwrite=True) as folder:  # --overwrite: our files go in beside the user's
        assert folder.staging is not None
        (folder.staging / "rank-0").mkdir()
        (folder.staging / "rank-0" / "run.json").write_text("{}")
        folder.commit(RunRecord(complete=True))
    assert (tmp_path / "rank-0" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "rank-0").iterdir()) == ["notes.txt", "run.json"]
    with RunFolder(tmp_path, overwrite=True) as folder:  # and a next run takes only ours away
        assert folder.staging is not None
        (folder.staging / "trace.json.gz").write_bytes(b"x")
        folder.commit(RunRecord(complete=True))
    assert sorted(p.name for p in (tmp_path / "rank-0").iterdir()) == ["notes.txt"]


def test_a_distributed_run_folder_is_replaced_by_a_single_process_run(tmp_path):
    from branchscope.profiling.run.folder import RunFolder

    with RunFolder(tmp_path) as folder:
        assert folder.staging is not None
        for r in (0, 1):
            (folder.staging / f"rank-{r}").mkdir()
            (folder.staging / f"rank-{r}" / "trace.json.gz").write_bytes(b"x")
        (folder.staging / "worker.log").write_text("")
        run = folder.commit(RunRecord(complete=True, ranks=[]))
    assert set(run.files or {}) == {"rank-0/trace.json.gz", "rank-1/trace.json.gz", "worker.log"}
    with RunFolder(tmp_path) as folder:  # every name is ours: no --overwrite needed
        assert folder.staging is not None
        (folder.staging / "trace.json.gz").write_bytes(b"y")
        folder.commit(RunRecord(complete=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "trace.json.gz"]


@pytest.mark.slow
def test_a_cancelled_distributed_run_stops_every_rank(tmp_path):
    import signal

    from branchscope.profiling.run.processes import CancelFlag

    model, marker = _model(tmp_path, "hang")
    out = tmp_path / "out"
    cancel = CancelFlag()

    def on_event(event: object) -> None:
        if isinstance(event, PhaseEvent) and event.phase == "warmup":  # rank 0's: both ranks run the model now
            wait_until(lambda: len(mentioning(marker)) == 2, 60, "both ranks' child processes")
            cancel.set(signal.SIGTERM)

    result = run_profile(_request(model, out), on_event, cancel)
    assert result.exit_code == 128 + signal.SIGTERM and result.cancelled_by == signal.SIGTERM
    _nothing_left(marker, str(out))
    assert not out.exists()


@pytest.mark.slow
def test_a_rank_whose_process_under_the_launcher_is_killed_is_named(tmp_path):
    """Either process of a rank may be killed (both read `...run.worker` in ps): the one the launcher
    started watches the worker; when it is the one killed, its reaper says which rank went first."""
    import signal
    import threading

    model, marker = _model(tmp_path, "hang")
    out = tmp_path / "out"

    def kill_rank_1() -> None:
        children = wait_until(lambda: len(mentioning(marker)) == 2 and mentioning(marker), 120, "both ranks")
        child = next(p for p in children if p.environ().get("RANK") == "1")  # type: ignore[union-attr]
        watcher = child.parent().parent()
        assert "branchscope.profiling.run.worker" in " ".join(watcher.cmdline())
        watcher.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_rank_1)
    killer.start()
    result = run_profile(_request(model, out))
    killer.join()
    assert result.exit_code == 4
    assert result.message and result.message.startswith("rank 1 (pid ")
    assert result.message.endswith("died (its process under the launcher was killed) before writing its results")
    _nothing_left(marker, str(out))


def test_a_rank_profiles_once_the_runner_samples_it(tmp_path):
    """A rank's events reach the runner through a file, late on a busy machine: two short profiled
    steps could be over before the runner began sampling (a rank without CPU samples, seen in CI).
    The rank waits for the runner's word (`RANK_SAMPLING`), which the runner gives on its "profile"."""
    import threading
    from types import SimpleNamespace

    from branchscope.profiling.run.distributed import Distributed
    from branchscope.profiling.run.protocol import RANK_EVENTS, RANK_SAMPLING
    from branchscope.profiling.run.supervise import Rank
    from branchscope.profiling.run.worker import _Protocol

    events = tmp_path / RANK_EVENTS.format(rank=3)
    waiter = threading.Thread(target=_Protocol.wait_until_sampled, args=(SimpleNamespace(events=events, rank=3),))
    waiter.start()
    rank = Rank(0)
    rank.rank = 3
    Distributed.sampling(SimpleNamespace(stage=tmp_path), rank)  # the runner's word, as it reads "profile"
    waiter.join(timeout=60)
    assert not waiter.is_alive() and (tmp_path / RANK_SAMPLING.format(rank=3)).exists()
    _Protocol.wait_until_sampled(SimpleNamespace(events=None, rank=None))  # a worker on the pipe: no wait
