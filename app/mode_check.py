"""Which modes can run under the worker's Python, asked before any run (fork needs TorchScript, which
a torch may lack, refuse or run disabled: `PYTORCH_JIT=0`).

The window never imports torch: the answer is that Python's probe (`interpreter.modes_unavailable`,
a short child process that imports torch there and asks each mode's `check`), run on a thread of its
own so the window stays responsive, and kept per Python for the session. `resolved(python, problems)`
says it: `problems` is {mode: the mode's one line of why} for the modes that cannot run there. The
run controls grey such a mode out with that line (`RunControls.set_mode_problems`), the Sweep page
unticks it, and the first run's lesson runs the mode offered instead (`RunLifecycle`).

A Python that cannot be probed (not there, no torch) leaves every mode offered: Run then says what
is wrong with it, as it does without this check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from branchscope.profiling.run import interpreter
from branchscope.profiling.run.interpreter import InterpreterError

#: The answers so far, per worker's Python (None: branchscope's own), for the session.
_answers: dict[Path | None, dict[str, str]] = {}


def probe(python: Path | None) -> dict[str, str]:
    """The modes that cannot run under `python`, with why ({} when it cannot be probed). Blocks: a
    thread's work (`ModeCheck.start`)."""
    try:
        return interpreter.modes_unavailable(python)
    except InterpreterError:
        return {}


class ModeCheck(QObject):
    """Asks, off the GUI thread, which modes the worker's Python cannot run (see the module docstring)."""

    #: (the worker's Python, None for branchscope's own; {mode: why it cannot run there}).
    resolved = Signal(object, object)
    #: A thread's answer, delivered on the GUI thread (a queued connection: emitted from the thread).
    _answered = Signal(object, object)

    def __init__(self, parent: QObject | None = None, ask: Callable[[Path | None], dict[str, str]] | None = None):
        super().__init__(parent)
        #: How a Python is asked (blocking; `probe`, or a test's fake).
        self.ask = ask or probe
        #: The Python whose answer is wanted now: a slower answer for an earlier one is kept, not said.
        self.wanted: Path | None = None
        self._asking: set[Path | None] = set()
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
        """Ask about `python` (None: branchscope's own): at once when it was asked before, else on a thread."""
        self.wanted = python
        if python in _answers:
            self.resolved.emit(python, dict(_answers[python]))
            return
        if python in self._asking:
            return
        self._asking.add(python)
        threading.Thread(target=self._ask, args=(python,), daemon=True, name="branchscope-mode-check").start()

    def _ask(self, python: Path | None) -> None:
        """On the thread: the answer, handed to the GUI thread (unless the window is gone by then)."""
        problems = self.ask(python)
        try:
            self._answered.emit(python, problems)
        except RuntimeError:  # this object was deleted with its window while the probe ran
            pass

    def _on_answer(self, python: Path | None, problems: dict[str, str]) -> None:
        self._asking.discard(python)
        _answers[python] = dict(problems)
        if python == self.wanted:
            self.resolved.emit(python, dict(problems))


def forget_answers() -> None:
    """Forget every answer (a Python reinstalled, a test's fake probe)."""
    _answers.clear()
