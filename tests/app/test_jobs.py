"""The window's job layer (app/jobs.py) behaves the same under RunController and SweepController:
`canceled` at once and `stopped` once the process has exited, a cancelled job's late events dropped,
a second start cancelling the first, and a program that cannot start (pytest-qt; stand-in children
that print the runner's and the sweep's JSON lines, no torch)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from branchscope.app.run_controller import FinishedRun, RunController, RunSpec
from branchscope.app.sweep_controller import SweepController
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.sweep import SweepRequest
from branchscope.profiling.trace.sweep_records import SweepRecord

#: Says it started, then waits until stopped; on SIGTERM it says more (a step, done) and exits 0:
#: what a cancelled job says after `cancel()` must never reach the controller's signals.
SLOW = """
import json, signal, sys, time
def say(**event):
    print(json.dumps(event), flush=True)
def stop(*_):
    say(event="progress", index=0, step=2, of=2)
    say(event="done", out="ignored")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
say(event="progress", index=0, step=1, of=2)
while True:
    time.sleep(1)
"""

#: Says a step and done, and exits.
QUICK = """
import json, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
print(json.dumps({"event": "progress", "index": 0, "step": 1, "of": 1}), flush=True)
print(json.dumps({"event": "done", "out": out}), flush=True)
"""


@dataclass
class Kind:
    """One controller and how a job of it is asked for, and what its signals carry for that job."""

    controller: Any
    ask: Callable[[str], Any]  # a job named NAME -> its RunSpec or SweepRequest
    start: Callable[[Any], None]
    payload: Callable[[Any], Any]  # what canceled/stopped carry for the job asked
    started_payload: Callable[[Any, Any], bool]  # started's argument is the job's
    finished_payload: Callable[[Any, Any], bool]


def run_kind(tmp_path: Path) -> Kind:
    c = RunController(runs_dir=tmp_path / "runs")
    return Kind(
        c,
        lambda name: RunSpec("fork", 2, 1, options=RunOptions(demo=name)),
        c.start,
        lambda spec: spec,
        lambda arg, spec: arg is spec,
        lambda arg, spec: isinstance(arg, FinishedRun) and arg.spec is spec,
    )


def sweep_kind(tmp_path: Path) -> Kind:
    c = SweepController()
    return Kind(
        c,
        lambda name: SweepRequest(out=tmp_path / name, modes=("sequential", "fork"), interop=(1,), intra=(1, 2),
                                  options=RunOptions(demo="twin-mm")),  # fmt: skip
        c.start,
        lambda request: str(request.out),
        lambda arg, request: isinstance(arg, SweepRecord) and len(arg.cells) == 4
        and {c.status for c in arg.cells} == {"not run"},
        lambda arg, request: arg == str(request.out),
    )


@pytest.fixture(params=["run", "sweep"])
def kind(request, qtbot, tmp_path):
    k = run_kind(tmp_path) if request.param == "run" else sweep_kind(tmp_path)
    for name, code in (("slow", SLOW), ("quick", QUICK)):
        (tmp_path / f"{name}.py").write_text(code)
    yield k
    k.controller.shutdown()
    assert k.controller.active_processes() == 0


def use(kind: Kind, tmp_path: Path, script: str) -> None:
    kind.controller.command = [sys.executable, str(tmp_path / f"{script}.py")]


def record(controller) -> list[tuple[str, tuple]]:
    """Every signal the controller emits, in order: (name, arguments)."""
    seen: list[tuple[str, tuple]] = []
    for name in ("started", "progress", "canceled", "stopped", "finished", "failed"):
        getattr(controller, name).connect(lambda *args, name=name: seen.append((name, args)))
    return seen


def test_cancel_says_canceled_at_once_and_stopped_once_the_process_ended(kind, qtbot, tmp_path):
    c = kind.controller
    use(kind, tmp_path, "slow")
    seen = record(c)
    job = kind.ask("a")
    with qtbot.waitSignal(c.progress, timeout=30_000):
        kind.start(job)
    assert c.is_running() and c.active_processes() == 1
    c.cancel()
    # At once, before the event loop has run: the job is no longer current, its process still stops.
    assert seen[-1] == ("canceled", (kind.payload(job),))
    assert not c.is_running() and c.active_processes() == 1
    c.cancel()  # nothing to cancel any more: nothing said
    with qtbot.waitSignal(c.stopped, timeout=30_000) as stopped:
        pass
    assert stopped.args == [kind.payload(job)]
    assert c.active_processes() == 0
    # What the child said after SIGTERM (a step, done) was dropped: no progress, no finished.
    assert [name for name, _ in seen] == ["started", "progress", "canceled", "stopped"]
    assert kind.started_payload(seen[0][1][0], job)


def test_a_second_start_cancels_the_first_and_runs(kind, qtbot, tmp_path):
    c = kind.controller
    use(kind, tmp_path, "slow")
    seen = record(c)
    first, second = kind.ask("a"), kind.ask("b")
    with qtbot.waitSignal(c.progress, timeout=30_000):
        kind.start(first)
    use(kind, tmp_path, "quick")
    kind.start(second)
    names = [name for name, _ in seen]
    assert names == ["started", "progress", "canceled", "started"]  # the first cancelled before the second started
    assert seen[2][1] == (kind.payload(first),) and kind.started_payload(seen[3][1][0], second)
    assert c.is_running() and c.active_processes() == 2
    qtbot.waitUntil(lambda: {"finished", "stopped"} <= {name for name, _ in seen}, timeout=30_000)
    ended = {name: args for name, args in seen[4:] if name in ("finished", "stopped", "failed")}
    assert set(ended) == {"finished", "stopped"}, seen
    assert ended["stopped"] == (kind.payload(first),) and kind.finished_payload(ended["finished"][0], second)
    assert [name for name, _ in seen].count("progress") == 2  # the first's step 1, the second's: none after cancel
    assert not c.is_running() and c.active_processes() == 0


def test_a_slot_of_started_may_cancel_the_new_job_which_then_never_starts(kind, qtbot, tmp_path):
    c = kind.controller
    use(kind, tmp_path, "slow")
    seen = record(c)
    c.started.connect(lambda *_: c.cancel())
    job = kind.ask("a")
    kind.start(job)
    assert [name for name, _ in seen] == ["started", "canceled", "stopped"]
    assert seen[2][1] == (kind.payload(job),)
    assert not c.is_running() and c.active_processes() == 0 and c.last_command[1] == str(tmp_path / "slow.py")


def test_a_program_that_cannot_start_fails_after_started_and_the_next_job_runs(kind, qtbot, tmp_path):
    c = kind.controller
    c.command = [str(tmp_path / "no-such-program")]
    seen = record(c)
    kind.start(kind.ask("a"))
    qtbot.waitUntil(lambda: any(name == "failed" for name, _ in seen), timeout=30_000)
    assert [name for name, _ in seen] == ["started", "failed"]
    assert seen[1][1][0].startswith(f"could not start the {c.program} ({tmp_path / 'no-such-program'}): ")
    assert not c.is_running() and c.active_processes() == 0
    use(kind, tmp_path, "quick")
    job = kind.ask("b")
    with qtbot.waitSignal(c.finished, timeout=30_000) as finished:
        kind.start(job)
    assert kind.finished_payload(finished.args[0], job)
    assert [name for name, _ in seen][2:] == ["started", "progress", "finished"]


@pytest.mark.parametrize("exit_code", [0, 3])
def test_an_exit_without_done_or_error_is_a_failure_with_the_last_line_of_stderr(kind, qtbot, tmp_path, exit_code):
    script = tmp_path / "says_nothing.py"
    script.write_text(f"import sys\nprint('something went wrong', file=sys.stderr)\nsys.exit({exit_code})\n")
    c = kind.controller
    c.command = [sys.executable, str(script)]
    seen = record(c)
    kind.start(kind.ask("a"))
    qtbot.waitUntil(lambda: any(name == "failed" for name, _ in seen), timeout=30_000)
    assert seen[-1][1][0] == f"the {c.program} exited with code {exit_code}: something went wrong"
    assert [name for name, _ in seen] == ["started", "failed"]
