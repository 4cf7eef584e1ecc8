"""What the GUI tests share: the fake runner and showing a view offscreen (the data they build is in
tests/builders)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gui"
#: Stands in for the runner: same arguments and JSON lines, no torch (fixtures/gui/fake_runner.py).
FAKE_RUNNER = [sys.executable, str(FIXTURES / "fake_runner.py")]


def show(qtbot: Any, view: Any, w: int, h: int) -> Any:
    """Shows `view` at w×h offscreen and waits until it is exposed."""
    qtbot.addWidget(view)
    view.resize(w, h)
    view.show()
    qtbot.waitExposed(view)
    return view


def select_rows(window: Any, rows: Any) -> None:
    """Select `rows` in the window's runs list (and only them), as Ctrl+click, Shift+click or Ctrl+A do."""
    from PySide6.QtCore import QItemSelection, QItemSelectionModel

    model = window.runs.model()
    selection = QItemSelection()
    for k in rows:
        selection.select(model.index(k, 0), model.index(k, model.columnCount() - 1))
    window.runs.selectionModel().select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)
