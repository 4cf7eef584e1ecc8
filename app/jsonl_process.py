"""One child process of the window that reports in JSON lines: a runner (`RunController`) or a
sweep (`SweepController`).

What both need from QProcess, once: the window's pid in the child's environment (so the child stops
itself when the window dies, see `profiling/run/processes.py`), stdout split into lines and each
event handed on as a typed `records.Event` (anything else on stdout is ignored), the tail of stderr kept for
the failure message, stopping with SIGTERM and then SIGKILL after a grace period, and waiting for it
when the window closes. `app/jobs.py` follows one such child at a time (start, cancel, end); the
controllers keep what the events mean.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, QTimer

from branchscope.profiling.run.protocol import PARENT_PID_ENV
from branchscope.profiling.trace.events import Event, decode_events
from branchscope.profiling.trace.records import MAX_ANSWER_BYTES

#: How long a stopped child gets to clean up (kill its worker, write its files) before SIGKILL.
CANCEL_GRACE_MS = 3000
#: The stderr kept: the last STDERR_KEEP bytes once it passes twice that.
STDERR_KEEP = 128_000


class JsonLinesProcess(QObject):
    """`command` run as a child whose stdout is JSON lines (see the module docstring).

    `on_event(event)` gets each event line (`records.Event`); `on_ended(exit_code, exit_status)` comes once the
    process has exited and all its output was read; `on_failed_to_start(reason)` instead of it
    when the program could not start.
    """

    def __init__(
        self,
        command: list[str],
        on_event: Callable[[Event], None],
        on_ended: Callable[[int, QProcess.ExitStatus], None],
        on_failed_to_start: Callable[[str], None],
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.command = list(command)
        self._on_event = on_event
        self._on_ended = on_ended
        self._on_failed_to_start = on_failed_to_start
        self._stdout = b""
        self._stderr = b""
        proc = self.process = QProcess(self)
        proc.setProgram(self.command[0])
        proc.setArguments(self.command[1:])
        env = QProcessEnvironment.systemEnvironment()
        env.insert(PARENT_PID_ENV, str(os.getpid()))  # the child stops when the window dies
        proc.setProcessEnvironment(env)
        proc.readyReadStandardOutput.connect(self._read_stdout)
        proc.readyReadStandardError.connect(self._read_stderr)
        proc.finished.connect(self._finished)
        proc.errorOccurred.connect(self._error)

    def start(self) -> None:
        """Start it (a program that cannot start calls `on_failed_to_start`, possibly before this returns)."""
        self.process.start()

    def running(self) -> bool:
        return self.process.state() != QProcess.ProcessState.NotRunning

    def stop(self, grace_ms: int = CANCEL_GRACE_MS) -> None:
        """SIGTERM now, SIGKILL if it is still running `grace_ms` later."""
        if self.running():
            self.process.terminate()
            # The process is the timer's context: if it is deleted first, the timer never fires.
            QTimer.singleShot(grace_ms, self.process, self._kill_if_running)

    def wait(self, wait_ms: int) -> None:
        """Wait for it to exit; SIGKILL after `wait_ms` (the window is closing)."""
        if self.running() and not self.process.waitForFinished(wait_ms):
            self.process.kill()
            self.process.waitForFinished(1000)

    def stderr_text(self) -> str:
        """The end of what it wrote on stderr."""
        return self._stderr.decode("utf-8", "replace").strip()

    def discard(self) -> None:
        """It is done with: delete it once the event loop comes back."""
        self.deleteLater()

    # ---- output -----------------------------------------------------------------------------
    def _kill_if_running(self) -> None:
        if self.running():
            self.process.kill()

    def _read_stdout(self) -> None:
        self._stdout += bytes(self.process.readAllStandardOutput())
        *lines, self._stdout = self._stdout.split(b"\n")
        if len(self._stdout) > MAX_ANSWER_BYTES:
            self._stdout = b""  # no event is that long (`decode_events` would skip it): not kept growing
        self._lines(lines)

    def _read_stderr(self) -> None:
        self._stderr += bytes(self.process.readAllStandardError())
        if len(self._stderr) > 2 * STDERR_KEEP:
            self._stderr = self._stderr[-STDERR_KEEP:]

    def _lines(self, lines: list[bytes]) -> None:
        for event in decode_events(lines):  # the runner's own reading of the same protocol
            self._on_event(event)

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._read_stdout()
        if self._stdout:  # a last line without its newline
            self._lines([self._stdout])
            self._stdout = b""
        self._read_stderr()
        self._on_ended(code, status)

    def _error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:  # other errors are followed by finished()
            self._on_failed_to_start(self.process.errorString())
