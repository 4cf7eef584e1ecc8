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

import os
import signal

# Re-exported: the run engine imports them from here.
from branchscope.profiling.linux import set_child_subreaper as set_child_subreaper
from branchscope.profiling.linux import set_death_signal as set_death_signal
from branchscope.profiling.run.protocol import RUN_TOKEN_ENV

PROCESSES_MODULE = "branchscope.profiling.run.processes"


def processes_with_token(token: str, also: tuple[str, ...] = ()) -> list[int]:
    """Pids of the processes whose environment holds RUN_TOKEN_ENV=token (those /proc lets us read),
    and every `also` entry (like "RANK=1": one rank's processes of a distributed run)."""
    needles = {f"{RUN_TOKEN_ENV}={token}".encode(), *(a.encode() for a in also)}
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
        if needles <= set(environ.split(b"\0")):
            found.append(int(entry))
    return found


def kill_processes_with_token(token: str, *, exclude: tuple[int, ...] = (), also: tuple[str, ...] = ()) -> list[int]:
    """SIGKILLs every process carrying the token (and `also`, see processes_with_token), but `exclude`
    and this one; returns their pids.

    Repeats until none is left, since a process may fork between the scan and the kill.
    """
    killed: list[int] = []
    for _ in range(20):
        # A killed process is a zombie until reaped, and a zombie's environ reads empty: not found again.
        pids = [pid for pid in processes_with_token(token, also) if pid != os.getpid() and pid not in exclude]
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


#: Set by `exec_as_child` to its own pid, which the command it execs keeps (the launcher of a
#: distributed run: its ranks check that their parent is still it, as the worker checks the runner).
LAUNCHER_PID_ENV = "BRANCHSCOPE_LAUNCHER_PID"


def exec_as_child(parent: int, command: list[str]) -> None:
    """Becomes `command` (execvp, same pid) that dies with `parent` (SIGKILL through PR_SET_PDEATHSIG,
    which exec keeps); leaves at once when `parent` is already gone. Never returns."""
    if set_death_signal(signal.SIGKILL) and os.getppid() != parent:
        os._exit(1)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    try:
        os.execvp(command[0], command)
    except OSError:
        os._exit(127)


if __name__ == "__main__":  # python -I -m branchscope.profiling.run.processes PARENT_PID -- COMMAND...
    import sys

    _argv = sys.argv[1:]
    if len(_argv) < 3 or not _argv[0].isdigit() or _argv[1] != "--":
        sys.stderr.write("usage: python -m branchscope.profiling.run.processes PARENT_PID -- COMMAND...\n")
        sys.exit(2)
    exec_as_child(int(_argv[0]), _argv[2:])
