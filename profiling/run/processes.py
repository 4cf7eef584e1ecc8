"""Keeping track of every process a run starts, so that none outlives it (Linux; no torch, no Qt).

A run's processes are found three ways, because each alone misses some:

- the worker's process group (the runner starts the worker as a group leader): everything the model
  starts that stays in the group;
- a token in the environment: the runner puts `BRANCHSCOPE_RUN_TOKEN=<random>` into the worker's
  environment, every process the model forks or execs inherits it, also those that leave the group
  or the session (a daemon: fork, setsid, fork again); `/proc/PID/environ` shows it;
- the runner as child subreaper (`PR_SET_CHILD_SUBREAPER`): a process orphaned while the run goes on
  is re-parented to the runner instead of init, so it stays among the runner's children even if it
  cleared its environment.

When the runner itself is killed (SIGKILL), the worker dies with it (`PR_SET_PDEATHSIG`) and the
worker's reaper kills the group and every process carrying the token (see branchscope.profiling.run.worker).
"""

from __future__ import annotations

import ctypes
import os
import signal

from branchscope.profiling.run.protocol import RUN_TOKEN_ENV

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, int(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_death_signal(signum: int) -> bool:
    """Linux: the kernel sends `signum` to this process when its parent (thread) dies; False where unsupported."""
    return _prctl(_PR_SET_PDEATHSIG, signum)


def set_child_subreaper(on: bool = True) -> bool:
    """Linux: orphaned descendants are re-parented to this process instead of init; False where unsupported."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0)


def processes_with_token(token: str) -> list[int]:
    """Pids of the processes whose environment holds RUN_TOKEN_ENV=token (those /proc lets us read)."""
    needle = f"{RUN_TOKEN_ENV}={token}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue  # gone, or not ours to read
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill_processes_with_token(token: str, *, exclude: tuple[int, ...] = ()) -> list[int]:
    """SIGKILLs every process carrying the token (but `exclude` and this one); returns their pids.

    Repeats until none is left, since a process may fork between the scan and the kill.
    """
    killed: list[int] = []
    for _ in range(20):
        # A killed process is a zombie until reaped, and a zombie's environ reads empty: not found again.
        pids = [pid for pid in processes_with_token(token) if pid != os.getpid() and pid not in exclude]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if pid not in killed:
                killed.append(pid)
    return killed


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
