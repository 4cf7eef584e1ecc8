"""Is CUDA there for the modes that need it (multi-stream)? Decided without importing torch in the window's process.

First a free check: with no NVIDIA driver (no /proc/driver/nvidia, no /dev/nvidia0 and no
nvidia-smi on PATH) CUDA cannot work, and the answer is immediate. Only where a driver exists is a
short background process started (`python -c "import torch; ..."`), since a CPU build of torch
sees no GPU even on a GPU machine; its answer (available, why, how many devices) is kept for the
rest of the session.
"""

from __future__ import annotations

import os
import shutil
import sys

from PySide6.QtCore import QObject, QProcess, Signal

_PROBE = (
    "import torch, sys\n"
    "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
    "sys.stdout.write(str(n))\n"
)
_cached: tuple[bool, str, int] | None = None


def driver_present() -> bool:
    return (
        os.path.isdir("/proc/driver/nvidia")
        or os.path.exists("/dev/nvidia0")
        or shutil.which("nvidia-smi") is not None
    )


class CudaCheck(QObject):
    """Emits `devicesCounted(n)` then `resolved(available, reason)`, once; `reason` says why
    the modes that need CUDA are unavailable (or how many devices there are); `device_count` is n."""

    resolved = Signal(bool, str)
    #: How many CUDA devices the worker's torch sees (0 without a driver or a CUDA build).
    devicesCounted = Signal(int)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.available: bool | None = None
        self.reason = "checking for CUDA…"
        #: CUDA devices a worker sees; None until checked.
        self.device_count: int | None = None
        self._proc: QProcess | None = None

    def start(self) -> None:
        global _cached
        if _cached is not None:
            self._set(*_cached)
        elif not driver_present():
            self._set(False, "no NVIDIA driver on this machine", 0)
        else:
            proc = QProcess(self)
            proc.setProgram(sys.executable)
            proc.setArguments(["-I", "-c", _PROBE])  # isolated: a torch.py in the current folder is never run
            proc.finished.connect(self._probe_done)
            proc.errorOccurred.connect(
                lambda _e: self._set(False, "the check for CUDA could not run", 0)
            )
            self._proc = proc
            proc.start()

    def _probe_done(self, code: int, _status) -> None:
        out = bytes(self._proc.readAllStandardOutput()).decode(errors="replace").strip() if self._proc else ""
        n = int(out) if code == 0 and out.isdigit() else 0
        if n > 0:
            self._set(True, f"{n} CUDA device{'s' if n > 1 else ''}", n)
        else:
            self._set(False, "this torch build sees no CUDA device", 0)

    def _set(self, available: bool, reason: str, count: int) -> None:
        global _cached
        if self.available is not None:
            return
        self.available, self.reason, self.device_count = available, reason, count
        _cached = (available, reason, count)
        self.devicesCounted.emit(count)
        self.resolved.emit(available, reason)
