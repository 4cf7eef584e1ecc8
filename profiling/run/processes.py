"""Keeping track of every process a run starts, so that none outlives it (Linux; no torch, no Qt).

A run's processes are found four ways, because each of the first three alone misses some:

- the worker's process group (the runner starts the worker as a group leader): everything the model
  starts that stays in the group;
- a token in the environment: the runner puts `BRANCHSCOPE_RUN_TOKEN=<random>` into the worker's
  environment, every process the model forks or execs inherits it, also those that leave the group
  or the session (a daemon: fork, setsid, fork again); `/proc/PID/environ` shows it;
- the runner as child subreaper (`PR_SET_CHILD_SUBREAPER`): a process orphaned while the run goes on
  is re-parented to the runner instead of init, so it stays among the runner's children even if it
  cleared its environment;
- the run's cgroup (`RunCgroup`), where the system lets the runner make one (see
  branchscope.profiling.linux.cgroup_bases: its own cgroup in the unified hierarchy, else the v1 freezer
  or pids one, each only where it may write there): the worker (or the launcher of a distributed run)
  joins it before it starts anything, and the kernel keeps every process started from there in it,
  whatever session, group, parent or environment it takes. The runner empties it (every member
  SIGKILLed until none is left) and removes it when the run ends.

When the runner itself is killed (SIGKILL), the worker dies with it (`PR_SET_PDEATHSIG`) and the
worker's reaper kills the group and every process carrying the token (see branchscope.profiling.run.worker);
the orphans, re-parented to init by then, are out of the subreaper's reach. The cgroup's watchdog
catches them: a tiny process the runner starts beside the run (outside its cgroup, in a session of its
own), `python -I -S .../linux.py watch RUNNER_PID KIND CGROUP`, which sleeps until the kernel tells it
the runner died (`PR_SET_PDEATHSIG`), then empties and removes the cgroup. A cgroup whose runner and
watchdog were both killed outright is emptied and removed by the next run that looks in the same place
(its name holds its runner's pid and start time). Where no cgroup can be made (a user without a
delegated cgroup, a read-only /sys/fs/cgroup), a process that leaves the group and the session and
drops the token, once the runner is SIGKILLed, is not caught (docs/internals.md, "Stopping every process of a run").
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import psutil

from branchscope.profiling import linux
from branchscope.profiling.linux import Cgroup, cgroup_bases, process_start_time

# Re-exported: the run engine imports them from here.
from branchscope.profiling.linux import set_child_subreaper as set_child_subreaper
from branchscope.profiling.linux import set_death_signal as set_death_signal
from branchscope.profiling.run.protocol import PARENT_PID_ENV, RUN_TOKEN_ENV

PROCESSES_MODULE = "branchscope.profiling.run.processes"

#: The run's cgroup folder: the worker, or the launcher of a distributed run, joins it first thing.
RUN_CGROUP_ENV = "BRANCHSCOPE_RUN_CGROUP"
#: A run's cgroup is named CGROUP_PREFIX + "RUNNER_PID-START_TIME-TOKEN": whether its runner still lives.
CGROUP_PREFIX = "branchscope-run-"
_STALE = re.compile(re.escape(CGROUP_PREFIX) + r"([0-9]+)-([0-9]+)-[0-9a-f]+")


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


class RunCgroup:
    """A run's cgroup and its watchdog (see the module docstring); `open` makes both, `close` ends both."""

    def __init__(self, cgroup: Cgroup, watchdog: subprocess.Popen[bytes] | None) -> None:
        self.cgroup = cgroup
        self.watchdog = watchdog

    @classmethod
    def open(cls, token: str, bases: list[Cgroup] | None = None) -> RunCgroup | None:
        """The run's cgroup, made in the first of `bases` (default: `cgroup_bases()`) where this process
        may make one, with its watchdog started; None where it may make none. Removes, on the way, the
        cgroups of dead runners it finds there."""
        me, started = os.getpid(), process_start_time(os.getpid())
        if started is None:  # no /proc
            return None
        for base in cgroup_bases() if bases is None else bases:
            remove_stale_cgroups(base)
            cgroup = Cgroup(base.path / f"{CGROUP_PREFIX}{me}-{started}-{token}", base.kind)
            if cgroup.make():
                return cls(cgroup, _start_watchdog(cgroup))
        return None

    def env(self) -> dict[str, str]:
        """What the run's first process needs in its environment to join the cgroup (`join_run_cgroup`)."""
        return {RUN_CGROUP_ENV: str(self.cgroup.path)}

    def add(self, pid: int) -> bool:
        return self.cgroup.join(pid)

    def kill(self, timeout: float = 30.0) -> bool:
        """SIGKILLs every process of the run until none is left (False: some outlasted `timeout` seconds)."""
        return self.cgroup.kill(timeout)

    def close(self, timeout: float = 30.0) -> bool:
        """Empties and removes the cgroup, then stops the watchdog (which removes what may be left,
        on its own time, when some process outlasted `timeout`); True when the cgroup is gone."""
        gone = self.cgroup.empty_and_remove(timeout)
        if self.watchdog is not None:
            try:
                self.watchdog.send_signal(signal.SIGTERM)
                self.watchdog.wait(timeout=10.0 if gone else 0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        return gone


def _start_watchdog(cgroup: Cgroup) -> subprocess.Popen[bytes] | None:
    """linux.py as a script (no branchscope import: it starts in milliseconds), outside the cgroup, in
    a session of its own (no signal sent to the caller's terminal or group reaches it)."""
    command = [sys.executable, "-I", "-S", str(Path(linux.__file__).resolve()), "watch", str(os.getpid()),
               cgroup.kind, str(cgroup.path)]  # fmt: skip
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )
    except OSError:
        return None


def remove_stale_cgroups(base: Cgroup) -> list[Path]:
    """Empties and removes the run cgroups under `base` whose runner is gone (killed outright together
    with its watchdog); returns those removed."""
    removed = []
    try:
        names = os.listdir(base.path)
    except OSError:
        return []
    for name in names:
        m = _STALE.fullmatch(name)
        if m is None or process_start_time(int(m[1])) == int(m[2]):
            continue
        stale = Cgroup(base.path / name, base.kind)
        if os.access(stale.path / "cgroup.procs", os.W_OK) and stale.empty_and_remove(timeout=2.0):  # another user's: not ours
            removed.append(stale.path)
    return removed


def join_run_cgroup() -> bool:
    """Moves this process into the run's cgroup ($BRANCHSCOPE_RUN_CGROUP, when set): the first step of
    the worker and of the launcher's shim, before either starts anything."""
    path = os.environ.get(RUN_CGROUP_ENV)
    return Cgroup(Path(path), "").join() if path else False


class Containment:
    """One child of branchscope's (a run's worker or launcher, `--python`'s probe) and everything it
    starts, found the four ways the module docstring says and stopped together by `stop()`.

    `spawn` makes this process a child subreaper, makes the cgroup (where one can be made) and starts
    the child in a session and process group of its own with `token` in its environment, in the
    cgroup; `stop` kills the group, the cgroup, every process carrying the token and every orphan
    re-parented here, reaps them and removes the cgroup, whatever happened. Use it as a context
    manager, or call `stop()` in a `finally`.
    """

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.proc: subprocess.Popen[bytes] | None = None
        self._cgroup: RunCgroup | None = None
        self._subreaper = False
        self._children_before: set[int] = set()

    def spawn(
        self,
        command: list[str],
        *,
        env: dict[str, str],
        cwd: str | os.PathLike[str],
        stdout: int | IO[bytes] | None,
        stderr: int | IO[bytes] | None,
    ) -> subprocess.Popen[bytes]:
        """Starts `command` contained (see the class docstring); `env` gets the token and the cgroup.
        Should it fail to start, nothing is left made (no cgroup, no subreaper)."""
        self._subreaper = set_child_subreaper(True)
        self._cgroup = RunCgroup.open(self.token)  # None where none can be made
        self._children_before = {p.pid for p in psutil.Process().children()}  # the cgroup's watchdog among them
        env = {**env, RUN_TOKEN_ENV: self.token, **(self._cgroup.env() if self._cgroup is not None else {})}
        try:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True
            )
        except BaseException:
            self._release()
            raise
        if self._cgroup is not None:
            self._cgroup.add(self.proc.pid)
        return self.proc

    def stop(self) -> None:
        """Kills the child and everything it started (see the class docstring) and reaps them; then
        removes the cgroup and this process is no subreaper any more. Safe to call twice."""
        proc = self.proc
        if proc is None:
            self._release()
            return
        try:
            kill_group(proc.pid)
            if self._cgroup is not None:
                self._cgroup.kill()
            kill_processes_with_token(self.token)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self._reap_orphans(self._children_before | {proc.pid})
        finally:
            self._release()
            self._reap_dead_orphans(self._children_before | {proc.pid})  # the child itself is Popen's to reap

    def _release(self) -> None:
        if self._cgroup is not None:
            self._cgroup.close(timeout=5.0)  # the watchdog takes what is left
            self._cgroup = None
        if self._subreaper:
            set_child_subreaper(False)
            self._subreaper = False

    @staticmethod
    def _reap_orphans(children_before: set[int]) -> None:
        """Kills and reaps this process's children that the child left (orphans re-parented here
        while it was a child subreaper)."""
        orphans = [p for p in psutil.Process().children() if p.pid not in children_before]
        for p in orphans:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(orphans, timeout=10)

    @staticmethod
    def _reap_dead_orphans(children_before: set[int]) -> None:
        """Once this process is no longer a subreaper: reaps the orphans that were re-parented here
        after `_reap_orphans` and have died since (zombies of a long-lived caller otherwise: tests run
        runs in-process). Only dead ones: a live child is someone else's to wait for."""
        for p in psutil.Process().children():
            try:
                if p.pid not in children_before and p.status() == psutil.STATUS_ZOMBIE:
                    p.wait(timeout=0)
            except (psutil.Error, psutil.TimeoutExpired):
                pass

    def __enter__(self) -> Containment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CancelFlag:
    """Set (from a signal handler or another thread) to stop a run or a sweep; `run_profile` and
    `run_sweep` poll it."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def set(self, signum: int = signal.SIGTERM) -> None:
        self.signum = int(signum)

    def is_set(self) -> bool:
        return self.signum is not None


@contextmanager
def stop_on_signals(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[CancelFlag]:
    """Within the block, these signals set the flag instead of raising (main thread only)."""
    flag = CancelFlag()
    previous = {signum: signal.signal(signum, lambda num, _frame: flag.set(num)) for signum in signums}
    try:
        yield flag
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stop_with_parent(cancel: CancelFlag) -> None:
    """Started by the window ($BRANCHSCOPE_PARENT_PID set: a runner, a sweep): set `cancel` when the
    window dies, SIGKILL included, through the SIGTERM the kernel then sends (PR_SET_PDEATHSIG; the
    caller turns SIGTERM into `cancel.set`, see `stop_on_signals`), and at once when the
    window died before the request took effect."""
    expected = os.environ.get(PARENT_PID_ENV, "")
    if not expected.isdigit():
        return
    if set_death_signal(signal.SIGTERM) and os.getppid() != int(expected):
        cancel.set(signal.SIGTERM)


#: Set by `exec_as_child` to its own pid, which the command it execs keeps (the launcher of a
#: distributed run: its ranks check that their parent is still it, as the worker checks the runner).
LAUNCHER_PID_ENV = "BRANCHSCOPE_LAUNCHER_PID"


def exec_as_child(parent: int, command: list[str]) -> None:
    """Becomes `command` (execvp, same pid) that dies with `parent` (SIGKILL through PR_SET_PDEATHSIG,
    which exec keeps), in the run's cgroup when there is one; leaves at once when `parent` is already
    gone. Never returns."""
    join_run_cgroup()  # before anything the launcher starts
    if set_death_signal(signal.SIGKILL) and os.getppid() != parent:
        os._exit(1)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    try:
        os.execvp(command[0], command)
    except OSError:
        os._exit(127)


if __name__ == "__main__":  # python -I -m branchscope.profiling.run.processes PARENT_PID -- COMMAND...
    _argv = sys.argv[1:]
    if len(_argv) < 3 or not _argv[0].isdigit() or _argv[1] != "--":
        sys.stderr.write("usage: python -m branchscope.profiling.run.processes PARENT_PID -- COMMAND...\n")
        sys.exit(2)
    exec_as_child(int(_argv[0]), _argv[2:])
