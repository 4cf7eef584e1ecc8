"""Linux process controls both engines use: ctypes `prctl` (no-ops that return False elsewhere), and
cgroups, where the system lets this process make one.

A cgroup is a folder of processes that the kernel keeps together: whatever a member forks or execs is
a member too, whatever session, process group, parent or environment it takes, and only a process
allowed to write to another cgroup's `cgroup.procs` can leave. `Cgroup` makes, joins, empties (every
member SIGKILLed until none is left) and removes one; `cgroup_bases` says where this process may make
one: under its own cgroup in the unified (v2) hierarchy, else in the v1 freezer, else the v1 pids
hierarchy.

This file imports nothing but the standard library: the run engine starts it as a script,
`python -I -S .../linux.py watch PARENT_PID CGROUP` (`watch`: the watchdog that empties and removes a
cgroup once its parent dies), without importing branchscope.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


_PRCTL: Any
try:  # looked up once, at import: a forked child must not dlopen (another thread may hold its lock)
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _PRCTL = None


def _prctl(option: int, value: int) -> bool:
    return _PRCTL is not None and _PRCTL(option, int(value), 0, 0, 0) == 0


def set_death_signal(signum: int) -> bool:
    """Linux: the kernel sends `signum` to this process when its parent (thread) dies; False where unsupported."""
    return _prctl(_PR_SET_PDEATHSIG, signum)


def set_child_subreaper(on: bool = True) -> bool:
    """Linux: orphaned descendants are re-parented to this process instead of init; False where unsupported."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0)


# ---------------------------------------------------------------- processes


def process_start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/PID/stat), None when it is gone or a zombie:
    with the pid, what tells a process apart from a later one given the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": the name may hold spaces
    try:
        state, start = fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None
    return None if state in (b"Z", b"X", b"x") else start


# ---------------------------------------------------------------- cgroups

#: The kinds of cgroup `cgroup_bases` offers, in the order it prefers them: v2 kills every member in
#: one write (cgroup.kill, Linux 5.14) or freezes them (cgroup.freeze, 5.2); the v1 freezer freezes
#: them, so none forks while they are killed; v1 pids only groups them (killed until none is left).
CGROUP_KINDS = ("v2", "freezer", "pids")


@dataclass(frozen=True)
class Cgroup:
    """One cgroup folder (`kind`: one of CGROUP_KINDS). No method raises OSError: each says whether it worked."""

    path: Path
    kind: str

    def _write(self, name: str, value: str, folder: Path | None = None) -> bool:
        try:  # never O_CREAT: a path that is no cgroup gets no file
            fd = os.open(folder / name if folder is not None else self.path / name, os.O_WRONLY)
        except OSError:
            return False
        try:
            os.write(fd, value.encode())
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def make(self) -> bool:
        """Creates the folder; True only when it is a new cgroup this process may move processes into
        (its own cgroup.procs and its parent's, the common ancestor's, writable), else removes it."""
        try:
            self.path.mkdir()
        except OSError:
            return False
        procs = [self.path / "cgroup.procs", self.path.parent / "cgroup.procs"]
        usable = all(os.access(p, os.W_OK) for p in procs)
        if self.kind == "v2":  # a kernel that can kill or freeze a v2 cgroup (5.2 and later)
            usable = usable and any((self.path / f).exists() for f in ("cgroup.kill", "cgroup.freeze"))
        if not usable:
            self.remove()
        return usable

    def join(self, pid: int = 0) -> bool:
        """Moves `pid` (this process by default), all its threads, into this cgroup."""
        return self._write("cgroup.procs", str(pid or os.getpid()))

    def pids(self) -> list[int]:
        """The members' pids, those of nested cgroups included (a member may make some)."""
        found: list[int] = []
        for folder, _, _ in os.walk(self.path):
            try:
                with open(os.path.join(folder, "cgroup.procs"), "rb") as f:
                    found += [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
        return found

    def _freeze(self, on: bool) -> bool:
        if self.kind == "v2":
            return self._write("cgroup.freeze", "1" if on else "0")
        if self.kind == "freezer":
            return self._write("freezer.state", "FROZEN" if on else "THAWED")
        return False

    def kill(self, timeout: float = 30.0) -> bool:
        """SIGKILLs every member until none is left (a zombie is no member); False when some are still
        there after `timeout` seconds (a process stuck in the kernel dies only when it leaves it)."""
        deadline = time.monotonic() + timeout
        pause = 0.002
        while True:
            if not self.pids():
                return True
            if time.monotonic() >= deadline:
                return False
            if not self._write("cgroup.kill", "1"):  # v2, 5.14: all at once, forks in flight included
                frozen = self._freeze(True)  # none forks between the listing and the kill
                try:
                    for pid in self.pids():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                finally:
                    if frozen:
                        self._freeze(False)  # a frozen v1 process dies only once thawed
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def remove(self) -> bool:
        """Removes the folder (nested cgroups first); True when it is gone. Only an empty cgroup goes."""
        if not self.path.is_dir():
            return True
        for folder, _, _ in os.walk(self.path, topdown=False):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass
            except OSError:
                return False
        return not self.path.exists()

    def empty_and_remove(self, timeout: float = 30.0) -> bool:
        """`kill`, then `remove`, tried until it works or `timeout` seconds have passed: a killed member
        leaves cgroup.procs as it starts to exit, but the cgroup stays populated, and rmdir says EBUSY,
        until its exit is complete (and, on some kernels, until it is reaped: its parent, or init, may
        take a while). Removing is tried even when some member outlasted the kill."""
        deadline = time.monotonic() + timeout
        self.kill(timeout)
        pause = 0.002
        while not self.remove():
            if time.monotonic() >= deadline:
                return False
            self.kill(max(0.0, deadline - time.monotonic()))  # one that joined meanwhile (a fork in flight)
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        return True


def _mounts() -> list[tuple[str, str, str, str]]:
    """(root inside the hierarchy, mount point, file system type, super options) of each mount."""
    mounts = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                head, sep, tail = line.partition(" - ")
                fields, rest = head.split(), tail.split()
                if sep and len(fields) >= 5 and len(rest) >= 3:
                    unescape = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
                    mounts.append((fields[3], unescape, rest[0], rest[2]))
    except OSError:
        pass
    return mounts


def _own_cgroups(pid: int | str = "self") -> dict[str, str]:
    """This process's cgroup per hierarchy: "v2" for the unified one, each v1 controller by name."""
    own: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                if parts[0] == "0" and parts[1] == "":
                    own["v2"] = parts[2]
                for controller in parts[1].split(","):
                    if controller:
                        own[controller] = parts[2]
    except OSError:
        pass
    return own


def cgroup_bases() -> list[Cgroup]:
    """This process's own cgroups in which it may try to make one (a folder for each kind of
    CGROUP_KINDS the system mounts, in that order); whether it may really is for `Cgroup.make` to say."""
    own = _own_cgroups()
    found: dict[str, Cgroup] = {}
    for root, point, fstype, options in _mounts():
        if fstype == "cgroup2":
            kind = "v2"
        elif fstype == "cgroup":
            kind = next((k for k in ("freezer", "pids") if k in options.split(",")), "")
        else:
            continue
        mine = own.get(kind)
        if not kind or kind in found or mine is None or "/.." in mine + "/":
            continue
        # The mount shows the hierarchy from `root` on (a container's own part of it, say).
        if root != "/" and not (mine == root or mine.startswith(root.rstrip("/") + "/")):
            continue
        inside = mine[len(root) :] if root != "/" else mine
        folder = Path(point) / inside.lstrip("/")
        if folder.is_dir():
            found[kind] = Cgroup(folder, kind)
    return [found[k] for k in CGROUP_KINDS if k in found]


def watch(parent: int, cgroup: Cgroup, timeout: float = 300.0) -> int:
    """The watchdog: waits, blocked in sigwait, for SIGTERM (sent by the kernel when `parent` dies, or by
    `parent` itself), then empties and removes `cgroup`. 0 when it is gone."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if set_death_signal(signal.SIGTERM) and os.getppid() == parent:
        signal.sigwait({signal.SIGTERM})
    return 0 if cgroup.empty_and_remove(timeout) else 1


if __name__ == "__main__":  # python -I -S .../linux.py watch PARENT_PID CGROUP_KIND CGROUP_PATH
    _argv = sys.argv[1:]
    if len(_argv) != 4 or _argv[0] != "watch" or not _argv[1].isdigit() or _argv[2] not in CGROUP_KINDS:
        sys.stderr.write("usage: python linux.py watch PARENT_PID CGROUP_KIND CGROUP_PATH\n")
        sys.exit(2)
    sys.exit(watch(int(_argv[1]), Cgroup(Path(_argv[3]), _argv[2])))
