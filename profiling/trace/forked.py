"""Run a function in a forked child and read back what it writes: a second core for the reader.

The child is a fork (Linux): it sees the parent's memory as it was, so the reader's text and event
list reach it with no copy, and it runs only code already imported (no locks, no Qt, no torch). Its
`write(file)` writes into a pipe, which the parent's `read(file)` reads as it comes, and it ends
with `os._exit`. It dies with the thread that forked it (`PR_SET_PDEATHSIG`), and `stop()` kills
it, so none outlives the load, cancelled or not.

Anything that goes wrong in the child (an exception, a crash, no fork at all) makes `result()` None:
the caller then does the work itself, so errors and their messages are the caller's own.
"""

from __future__ import annotations

import io
import os
import select
import signal
import time
import warnings
from collections.abc import Callable
from typing import TypeVar

from branchscope.profiling.linux import set_death_signal

T = TypeVar("T")
_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16

# Python 3.12+ warns of a fork in a process with threads (the window's). The child runs only the
# reader's own code, which takes no lock another thread may hold (glibc resets malloc's at fork).
warnings.filterwarnings("ignore", r".*use of fork\(\) may lead to deadlocks", DeprecationWarning, __name__)


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ForkedCall:
    """`write(file)` running in a forked child; `result(read)` reads it, `stop()` ends it."""

    def __init__(self, pid: int, read_fd: int):
        self._pid: int | None = pid
        self._fd: int | None = read_fd

    @classmethod
    def start(cls, write: Callable[[io.BufferedWriter], object]) -> ForkedCall | None:
        """Fork a child running `write(pipe)`; None if no child can be started."""
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
                if set_death_signal(signal.SIGKILL) and os.getppid() != parent:
                    os._exit(1)  # the parent died before the death signal was set
                # Only its pipe: a pipe another thread was setting up must see its EOF on time.
                os.closerange(3, w)
                os.closerange(w + 1, _MAX_FD)
                with os.fdopen(w, "wb") as pipe:
                    write(pipe)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r)

    def result(
        self,
        read: Callable[[io.BufferedReader], T],
        waiting: Callable[[], object] = lambda: None,
        timeout: float | None = None,
    ) -> T | None:
        """`read(pipe)` of what the child wrote, once the child has ended well; None if the child
        failed or died, `read` found the data cut short or malformed, or the child had not begun
        to write within `timeout` seconds (a stuck or starved child: it is killed, the caller does
        the work). Meanwhile `waiting()` is called every 50 ms: an exception it raises (a
        cancelled load) ends the wait; `stop()` then ends the child."""
        if self._fd is None or self._pid is None:
            return None
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = select.poll()  # not select(): it cannot watch a descriptor numbered 1024 or more
        poll.register(self._fd, select.POLLIN)
        while not poll.poll(50):
            if deadline is not None and time.monotonic() > deadline:
                self._reap(kill=True)
                return None
            waiting()
        fd, self._fd = self._fd, None
        value: T | None = None
        with os.fdopen(fd, "rb") as pipe:
            try:
                value = read(pipe)
            except (OSError, EOFError, ValueError, TypeError, KeyError, MemoryError):
                value = None
        status = self._reap(kill=value is None)
        if value is None or status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        return value

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
