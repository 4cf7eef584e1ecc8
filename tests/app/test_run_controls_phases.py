"""The run controller turns the runner's phase lines into `phase` signals, and the controls show
them (pytest-qt; a stand-in runner that prints the runner's JSON lines, no torch)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from branchscope.app.run_controller import RunController, RunSpec
from branchscope.app.run_controls import RunControls
from branchscope.profiling.run.options import RunOptions

PHASES = ["load", "warmup", "timing", "profile", "export"]

RUNNER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1])
    def emit(**event):
        print(json.dumps(event), flush=True)
    emit(event="phase", phase="load")
    emit(event="phase", phase="warmup")
    emit(event="phase", phase="timing")
    emit(event="phase", phase="profile")
    emit(event="progress", step=1, of=2)
    emit(event="progress", step=2, of=2)
    emit(event="phase", phase="export")
    emit(event="phase")  # no phase name: ignored
    out.mkdir(parents=True)
    emit(event="done", out=str(out), run={"mode": "fork", "notes": args})  # notes: run.json's, to carry argv
    """
)


@pytest.fixture
def controller(qtbot, tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    c = RunController(command=[sys.executable, str(script)], runs_dir=tmp_path / "runs")
    yield c
    c.shutdown()


def test_phases_arrive_in_order_before_the_run_finishes(controller, qtbot):
    seen: list[tuple] = []
    controller.phase.connect(lambda p: seen.append(("phase", p)))
    controller.progress.connect(lambda i, n: seen.append(("step", i, n)))
    with qtbot.waitSignal(controller.finished, timeout=30_000) as done:
        controller.start(RunSpec("fork", 2, 1, options=RunOptions(steps=2, demo="twin-mm", timeout=42.0)))
    assert [s[1] for s in seen if s[0] == "phase"] == PHASES
    assert seen.index(("phase", "profile")) < seen.index(("step", 1, 2)) < seen.index(("phase", "export"))
    argv = done.args[0].run.notes
    assert argv[argv.index("--timeout") + 1] == "42.0"


def test_the_controls_show_each_phase_then_the_steps(controller, qtbot):
    controls = RunControls([], cores=2)
    qtbot.addWidget(controls)
    controller.started.connect(controls.show_started)
    controller.phase.connect(controls.show_phase)
    controller.progress.connect(controls.show_progress)
    shown: list[str] = []
    controller.phase.connect(lambda _p: shown.append(controls.progress.format()))
    controller.progress.connect(lambda _i, _n: shown.append(controls.progress.format()))
    with qtbot.waitSignal(controller.finished, timeout=30_000):
        controller.start(RunSpec("fork", 2, 1, options=RunOptions(steps=2, demo="twin-mm")))
    words = [s.rsplit(" ", 2)[0] if s.endswith(" s") else s for s in shown]
    assert words == [
        "loading the model…", "warming up…", "timing steps…", "profiling steps…",
        "step 1 of 2", "step 2 of 2", "writing the trace…",
    ]  # fmt: skip
    assert controls.phase_timer.isActive()  # ticking until the window says the run ended
    controls.show_idle("done")
    assert not controls.phase_timer.isActive() and controls.progress.format() == "done"


def test_phases_of_a_cancelled_run_are_not_reported(controller, qtbot, tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text(
        "import json, time\n"
        "print(json.dumps({'event': 'phase', 'phase': 'load'}), flush=True)\n"
        "time.sleep(60)\n"
        "print(json.dumps({'event': 'phase', 'phase': 'warmup'}), flush=True)\n"
    )
    controller.command = [sys.executable, str(slow)]
    seen: list[str] = []
    controller.phase.connect(seen.append)
    with qtbot.waitSignal(controller.phase, timeout=30_000):
        controller.start(RunSpec("fork", 2, 1, options=RunOptions(demo="twin-mm")))
    with qtbot.waitSignal(controller.canceled):
        controller.cancel()
    qtbot.waitUntil(lambda: controller.active_processes() == 0, timeout=10_000)
    assert seen == ["load"]


@pytest.mark.slow
def test_a_real_run_reports_its_phases(qtbot, tmp_path):
    controller = RunController(runs_dir=tmp_path / "runs")  # the real runner, a small demo
    seen: list[str] = []
    ended: list[str] = []
    controller.phase.connect(seen.append)
    controller.finished.connect(lambda _run: ended.append("finished"))
    controller.failed.connect(lambda message, details: ended.append(f"{message}\n{details}"))
    try:
        controller.start(RunSpec("fork", 2, 1, options=RunOptions(steps=2, warmup=1, demo="twin-mm")))
        qtbot.waitUntil(lambda: bool(ended), timeout=240_000)
    finally:
        controller.shutdown()
    assert ended == ["finished"], ended[0][-3000:]
    assert seen == PHASES
