"""Linux process controls both engines use (ctypes `prctl`; no-ops that return False elsewhere)."""

from __future__ import annotations

import ctypes

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
