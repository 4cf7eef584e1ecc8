"""Which modes can run under the worker's Python, asked before any run (fork needs TorchScript, which
a torch may lack, refuse or run disabled: `PYTORCH_JIT=0`).

The window never imports torch, nor probes in its own process: the answer is that Python's probe
(`interpreter.modes_unavailable`, a short child that imports torch there and asks each mode's
`check`), asked by a child of the window's, `profiling/run/mode_probe.py`, which reports one
`ModesEvent` line. (The probe is contained like a worker: its process becomes a subreaper that
kills every child it did not start, which in the window would be the runner of a Run click.) The
child dies with the window, and `shutdown` stops it when the window closes. An answer is kept per
Python for the session; a Python that could not be asked (not there yet, no torch, a probe killed
or timed out on a busy machine) is asked again next time. `resolved(python, problems)` says it:
`problems` is {mode: the mode's one line of why} for the modes that cannot run there, {} when it
could not be asked (every mode offered: Run then says what is wrong, as it does without this
check). The run controls grey such a mode out with that line (`RunControls.set_mode_problems`),
the Sweep page unticks it, and the first run's lesson runs the mode offered instead (`RunLifecycle`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from branchscope.app.jsonl_process import JsonLinesProcess
from branchscope.profiling.run.mode_probe import MODE_PROBE_MODULE
from branchscope.profiling.trace.events import Event, ModesEvent

#: The answers so far, per worker's Python (None: branchscope's own), for the session.
_answers: dict[Path | None, dict[str, str]] = {}
#: How long a closing window waits for a probe it stops.
STOP_WAIT_MS = 2000

#: A blocking way to ask (a test's fake): {mode: why}, or None when the Python could not be asked.
Ask = Callable[[Path | None], "dict[str, str] | None"]


class ModeCheck(QObject):
    """Asks which modes the worker's Python cannot run, off the GUI thread (see the module docstring)."""

    #: (the worker's Python, None for branchscope's own; {mode: why it cannot run there}).
    resolved = Signal(object, object)
    #: A test's answer from its thread, delivered on the GUI thread (a queued connection).
    _answered = Signal(object, object)

    def __init__(self, parent: QObject | None = None, ask: Ask | None = None):
        super().__init__(parent)
        #: How a Python is asked: None, the mode probe's child process; else a blocking function
        #: run on a thread (a test's fake).
        self.ask = ask
        #: The Python whose answer is wanted now: a slower answer for an earlier one is kept, not said.
        self.wanted: Path | None = None
        #: The Pythons being asked, with the child asking each (None: a test's thread).
        self._asking: dict[Path | None, JsonLinesProcess | None] = {}
        self._answered.connect(self._on_answer)

    @classmethod
    def for_window(cls, window: Any, controls: Any, sweep_panel: Any, start: bool) -> ModeCheck:
        """The window's check: its answers go to the run controls and the Sweep page; with `start`,
        asked once the window shows and again whenever the user sets another worker's Python."""
        check = cls(window)
        check.resolved.connect(lambda python, problems: controls.set_mode_problems(problems, python))
        check.resolved.connect(lambda _python, problems: sweep_panel.set_mode_problems(problems))
        if start:
            controls.pythonChanged.connect(lambda _text: check.start(controls.python()))
            QTimer.singleShot(0, lambda: check.start(controls.python()))
        return check

    def start(self, python: Path | None) -> None:
        """Ask about `python` (None: branchscope's own): at once when it was answered before, else
        through a child (or a test's thread)."""
        self.wanted = python
        if python in _answers:
            self.resolved.emit(python, dict(_answers[python]))
            return
        if python in self._asking:
            return
        if self.ask is not None:
            self._asking[python] = None
            threading.Thread(target=self._ask_on_thread, args=(python,), daemon=True, name="branchscope-mode-check").start()
            return
        self._asking[python] = child = self._child(python)
        child.start()  # one that cannot start answers None, perhaps before this returns

    def shutdown(self) -> None:
        """The window closes: stop every probe still asking."""
        for child in list(self._asking.values()):
            if child is not None:
                child.stop()
                child.wait(STOP_WAIT_MS)

    def _child(self, python: Path | None) -> JsonLinesProcess:
        """The mode probe asking about `python`, its answer (the last `ModesEvent`) said when it ends."""
        said: list[ModesEvent] = []

        def on_event(event: Event) -> None:
            if isinstance(event, ModesEvent):
                said.append(event)

        def on_ended(_code: int, _status: Any) -> None:
            answer = said[-1] if said else None
            self._on_answer(python, answer.problems if answer is not None and answer.error is None else None)

        command = [sys.executable, "-I", "-m", MODE_PROBE_MODULE, os.fspath(python) if python is not None else ""]
        return JsonLinesProcess(command, on_event, on_ended, lambda _why: self._on_answer(python, None), parent=self)

    def _ask_on_thread(self, python: Path | None) -> None:
        """On a test's thread: its answer, handed to the GUI thread (unless the window is gone by then)."""
        try:
            problems = self.ask(python) if self.ask is not None else None
        except Exception:  # noqa: BLE001 - a fake that fails answers as a Python that cannot be asked
            problems = None
        try:
            self._answered.emit(python, problems)
        except RuntimeError:  # this object was deleted with its window while it asked
            pass

    def _on_answer(self, python: Path | None, problems: dict[str, str] | None) -> None:
        """`python`'s answer (None: it could not be asked; every mode stays offered, asked again next time)."""
        # The child, done, stays this object's until it goes (a deleteLater here, still inside the
        # child's own finished signal, crashed PySide when this object was deleted before it ran).
        self._asking.pop(python, None)
        if problems is not None:
            _answers[python] = dict(problems)
        if python == self.wanted:
            self.resolved.emit(python, dict(problems or {}))


def forget_answers() -> None:
    """Forget every answer (a Python reinstalled, a test's fake probe)."""
    _answers.clear()
