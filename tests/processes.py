"""Helpers for tests that start processes and wait for them (no sleeping assertions)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import psutil
import pytest


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> object:
    """Polls `condition` until it returns something true; a bounded loop that fails the test, not a
    timing assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def mentioning(text: str) -> list[psutil.Process]:
    """Live processes (not zombies, not this one) whose command line mentions `text` (a test's
    marker, a run's --out folder)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(text in part for part in p.info["cmdline"] or []) and p.pid != os.getpid() and alive(p.pid):
                found.append(p)
        except psutil.Error:
            pass
    return found


def kill_all(pids: list[int]) -> None:
    """SIGKILLs each of `pids` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
