"""How a worker's process lives and dies with the processes that wait for it.

Dying with the runner: before anything else the worker asks the kernel for SIGKILL when its parent
dies (PR_SET_PDEATHSIG) and checks its parent is still the runner ($BRANCHSCOPE_RUNNER_PID). Processes
the model starts would survive that, so a worker that leads its own process group (the runner starts
it so) forks a tiny reaper first: it waits, blocked in sigwait, for its own death signal, sent when
the worker dies, and then SIGKILLs every process carrying the run's token (those that left the group
too, see branchscope.profiling.run.processes) and the whole group. Being a separate single-threaded process, it
works even while the worker's main thread is stuck in native code. Before all that, the worker joins the
run's cgroup when the runner made one ($BRANCHSCOPE_RUN_CGROUP): what the model starts and that drops
both the group and the token is in it, and the cgroup's watchdog empties it when the runner dies.

A rank of a distributed run is two processes: the one the launcher started (`watch_rank`), which
dies with the launcher, forks the rank's reaper and its worker, and says how the worker ended.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from branchscope.profiling.run.processes import (
    LAUNCHER_PID_ENV,
    join_run_cgroup,
    kill_processes_with_token,
    set_death_signal,
)
from branchscope.profiling.run.protocol import (
    EVENTS_DIR_ENV,
    EXIT_FAILED,
    RANK_EVENTS,
    RUN_TOKEN_ENV,
    RUNNER_PID_ENV,
)
from branchscope.profiling.trace.events import EndedEvent, ExitedEvent, encode_event


def die_with_parent() -> None:
    """SIGKILL this worker when the runner dies, and its process group with it (see the module docstring)."""
    join_run_cgroup()  # first: everything started from here on stays in the run's cgroup
    expected = os.environ.get(RUNNER_PID_ENV, "")
    if set_death_signal(signal.SIGKILL) and expected.isdigit() and os.getppid() != int(expected):
        os._exit(EXIT_FAILED)  # the runner died before the request took effect: nobody waits for this run
    if os.getpgrp() == os.getpid():  # leads its own group (never when run by hand in a shell's group)
        start_group_reaper(os.getpid())


def start_group_reaper(worker: int, also: tuple[str, ...] = (), ended: tuple[Path, int] | None = None) -> None:
    """Forks the reaper (single-threaded here: nothing has started a thread yet); `also`: the
    environment entries that, beside the run's token, mark the processes it kills (one rank's);
    `ended`: (events file, rank) where it says `{"event": "ended", "rank", "t"}` once `worker` is gone
    (how a rank whose watching process was killed is told apart from ranks stopped after it)."""
    if os.fork() != 0:
        return
    code = 0
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # never hold the runner's end of the protocol pipe open
        os.closerange(3, 1024)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        stopped = False
        if set_death_signal(signal.SIGTERM) and os.getppid() == worker:
            # The worker died (the kernel sends the death signal as from the dying parent: si_pid is
            # the worker's), or someone signalled the group to stop (the launcher: its pid).
            stopped = signal.sigwaitinfo({signal.SIGTERM}).si_pid != worker
        if ended is not None:
            with open(ended[0], "ab") as f:
                f.write(encode_event(EndedEvent(rank=ended[1], t=time.monotonic(), stopped=stopped)) + b"\n")
        token = os.environ.get(RUN_TOKEN_ENV)
        if token:  # what the model started and that left the group (a daemon)
            kill_processes_with_token(token, also=also)
        os.killpg(worker, signal.SIGKILL)  # the worker, what the model started, and this reaper
    except BaseException:  # noqa: BLE001 - the reaper must never return into the worker's code
        code = 1
    os._exit(code)


def watch_rank(run_rank: Callable[[Path, int], NoReturn]) -> NoReturn:
    """One rank of a distributed run, started by torch.distributed.run (never returns): its worker
    is `run_rank(events file, rank)`.

    This process (the one the launcher started, leading its own group) dies with the launcher and
    forks the rank's reaper as the worker does (it kills this rank's processes only: the token and
    RANK=R), then forks the rank's worker, which dies with it, and waits for it: its
    `{"event": "exited", "rank", "pid", "code", "t"}` (code: the exit status, -N for signal N) tells
    the runner how the rank ended, which a launcher cannot (it sees this process, not the worker).
    """
    rank = int(os.environ.get("RANK", "0"))
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if set_death_signal(signal.SIGKILL) and launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(EXIT_FAILED)  # the launcher died before the request took effect
    events = Path(os.environ[EVENTS_DIR_ENV]) / RANK_EVENTS.format(rank=rank)
    if os.getpgrp() == os.getpid():
        start_group_reaper(os.getpid(), also=(f"RANK={rank}",), ended=(events, rank))
    watcher = os.getpid()
    child = os.fork()
    if child == 0:
        if set_death_signal(signal.SIGKILL) and os.getppid() != watcher:
            os._exit(EXIT_FAILED)
        run_rank(events, rank)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        with open(events, "ab") as f:
            f.write(encode_event(ExitedEvent(rank=rank, pid=child, code=code, t=time.monotonic())) + b"\n")
    except OSError:
        pass
    os._exit(code if code >= 0 else 128 - code)
