"""What the GUI tests share: the small synthetic trace, the fake runner, showing a view offscreen."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gui"
#: Stands in for the runner: same arguments and JSON lines, no torch (fixtures/gui/fake_runner.py).
FAKE_RUNNER = [sys.executable, str(FIXTURES / "fake_runner.py")]


def write_small_trace(path: Path, mode: str = "fork") -> Path:
    """Writes fixtures/gui/small_trace.py's trace of a run in `mode` to `path` (gzipped for .gz)."""
    spec = importlib.util.spec_from_file_location("small_trace", FIXTURES / "small_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write(path, mode)


def show(qtbot: Any, view: Any, w: int, h: int) -> Any:
    """Shows `view` at w×h offscreen and waits until it is exposed."""
    qtbot.addWidget(view)
    view.resize(w, h)
    view.show()
    qtbot.waitExposed(view)
    return view
