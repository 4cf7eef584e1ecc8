"""Run a function in a forked child and take back the bytes it returns: a second core for the reader.

The child is a fork (Linux): it sees the parent's memory as it was, so the reader's text and event
list reach it with no copy, and it runs only code already imported (no locks, no Qt, no torch). It
sends `fn()`'s bytes through a pipe and ends with `os._exit`. It dies with the thread that forked it
(`PR_SET_PDEATHSIG`), and `stop()` kills it, so none outlives the load, cancelled or not.

Anything that goes wrong in the child (an exception, a crash, no fork at all) makes `result()` None:
the caller then does the work itself, so errors and their messages are the caller's own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from branchscope.profiling.linux import set_death_signal

_READ = 1 << 20


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ForkedCall:
    """`fn()` running in a forked child; `result()` waits for its bytes, `stop()` ends it."""

    def __init__(self, pid: int, read_fd: int):
        self._pid: int | None = pid
        self._fd: int | None = read_fd

    @classmethod
    def start(cls, fn: Callable[[], bytes]) -> ForkedCall | None:
        """Fork a child running `fn`; None if no child can be started."""
        if not hasattr(os, "fork"):  # pragma: no cover - not POSIX
            return None
        parent = os.getpid()
        try:
            r, w = os.pipe()
        except OSError:
            return None
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.close(r)
                if set_death_signal(signal.SIGKILL) and os.getppid() != parent:
                    os._exit(1)  # the parent died before the death signal was set
                view = memoryview(fn())
                while view:
                    view = view[os.write(w, view) :]
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r)

    def result(self) -> bytes | None:
        """The child's bytes once it has ended well; None if it failed or died."""
        fd = self._fd
        if fd is None or self._pid is None:
            return None
        parts = []
        try:
            while chunk := os.read(fd, _READ):
                parts.append(chunk)
        except OSError:
            parts = []
        status = self._reap(kill=False)
        if status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        return b"".join(parts)

    def stop(self) -> None:
        """Kill the child if it still runs, reap it, close the pipe (safe to call again)."""
        self._reap(kill=True)

    def _reap(self, kill: bool) -> int | None:
        pid, self._pid = self._pid, None
        status = None
        if pid is not None:
            if kill:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return status
