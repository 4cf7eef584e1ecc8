"""Linux process controls both engines use (ctypes `prctl`; no-ops that return False elsewhere)."""

from __future__ import annotations

import ctypes
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
