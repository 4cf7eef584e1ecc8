"""Facts about the machine: the cores this process may run on, as the worker, the sweep and the
window all count them. No torch, no Qt."""

from __future__ import annotations

import math
import os


def usable_cores() -> int:
    """The CPUs this process may run on, counted the way the worker counts them for its runs
    (`len(os.sched_getaffinity(0))`): a container or `taskset` may allow fewer than the machine has,
    and the thread sliders and the oversubscription hint must agree with the runs' `cores`."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return os.cpu_count() or 1


#: Other processes are said to have loaded the machine when they used more than this share of the
#: usable cores while a run timed its steps (`RunRecord.load.busy`).
BUSY_SHARE = 0.2


def usable_cpus() -> frozenset[int] | None:
    """The CPU numbers this process may run on (its affinity); None where that cannot be told."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return frozenset(os.sched_getaffinity(0))
        except OSError:
            return None
    return None


def load_average(text: str) -> float | None:
    """The 1-minute load average of /proc/loadavg's text ("0.52 0.58 0.59 2/1051 12345"); None
    when the text is not of that shape."""
    fields = text.split()
    try:
        value = float(fields[0])
    except (IndexError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def cpu_ticks(text: str, cpus: frozenset[int] | None = None) -> tuple[int, int] | None:
    """(busy, total) clock ticks (USER_HZ) of /proc/stat's text, summed over the CPUs `cpus` (None:
    the machine's "cpu" line). Busy is every column but idle, iowait and steal (time the hypervisor
    gave to another guest is nobody's here; guest time is already counted in user). None when no
    line for those CPUs is there."""
    busy = total = 0
    found = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu"):
            continue
        if cpus is None:
            if name != "cpu":
                continue
        else:
            number = name[3:]
            if not number.isdigit() or int(number) not in cpus:
                continue
        try:
            ticks = [int(x) for x in rest.split()]
        except ValueError:
            continue
        if len(ticks) < 4:
            continue
        # user nice system idle iowait irq softirq steal guest guest_nice
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        steal = ticks[7] if len(ticks) > 7 else 0
        counted = sum(ticks[:8])  # guest and guest_nice are part of user and nice
        busy += counted - idle - steal
        total += counted
        found = True
    return (busy, total) if found else None


def busy_warning(others_cores: float, cores: int) -> str:
    """The run.json warning of a run beside other work (`BUSY_SHARE`)."""
    return (
        f"other processes used {others_cores:.1f} of {cores} core{'s' if cores != 1 else ''} while this run "
        "timed its steps: its times are not comparable with a quiet run's"
    )


def is_busy(others_cores: float, cores: int) -> bool:
    """Whether other processes took more than `BUSY_SHARE` of the usable cores."""
    return others_cores > BUSY_SHARE * max(1, cores)
