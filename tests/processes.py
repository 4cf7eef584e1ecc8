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


def kill_all(pids: list[int]) -> None:
    """SIGKILLs each of `pids` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
