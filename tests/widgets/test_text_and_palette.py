"""Ctrl+plus/minus scale the text of every view (a projector); the dark palette reaches the charts."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from branchscope.app.pages.run_page import RunPage
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.widgets.charts import GutterText
from branchscope.widgets.theme import LIGHT
from tests.builders.runs import write_small_trace


def _tick_font_size(view) -> float:
    axes = [i for i in view.scene().items() if isinstance(i, pg.AxisItem) and hasattr(i, "apply_theme")]
    sizes = {a.style["tickFont"].pointSizeF() for a in axes if a.style.get("tickFont") is not None}
    assert len(sizes) == 1, sizes
    return sizes.pop()


def test_ctrl_plus_and_minus_scale_the_fonts_of_the_views_and_ctrl_0_restores(window, qtbot, tmp_path):
    assert window.open_trace_files([str(write_small_trace(tmp_path / "t.json"))]) == 1
    base = QApplication.font().pointSizeF()
    qtbot.keyClick(window, Qt.Key.Key_Plus, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window, Qt.Key.Key_Plus, Qt.KeyboardModifier.ControlModifier)
    bigger = QApplication.font().pointSizeF()
    assert bigger > base * 1.25
    qtbot.waitUntil(lambda: _tick_font_size(window.page(RunPage).workspace.panel("pool")) == bigger)
    labels = [i for i in window.page(RunPage).workspace.panel("pool").scene().items() if isinstance(i, GutterText)]
    assert labels and all(lab.text.font().pointSizeF() == bigger for lab in labels)
    qtbot.keyClick(window, Qt.Key.Key_Minus, Qt.KeyboardModifier.ControlModifier)
    assert base < QApplication.font().pointSizeF() < bigger
    assert window.settings.value("textSteps") in (1, "1")
    qtbot.keyClick(window, Qt.Key.Key_0, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.font().pointSizeF() == base
    assert window.settings.value("textSteps") in (0, "0")


def test_dark_palette_turns_the_chart_backgrounds_and_gutters_dark_and_back(window, qtbot, tmp_path):
    assert window.open_trace_files([str(write_small_trace(tmp_path / "t.json"))]) == 1
    pool = window.page(RunPage).workspace.panel("pool")

    def background_lightness() -> int:
        return pool.backgroundBrush().color().lightness()

    assert background_lightness() > 200
    window.menus.dark_action.trigger()
    assert window.menus.dark_action.isChecked()
    qtbot.waitUntil(lambda: background_lightness() < 80)  # Qt posts the palette change to the widgets
    labels = [i for i in pool.scene().items() if isinstance(i, GutterText)]
    assert labels and all(lab.text.defaultTextColor().lightness() > 128 for lab in labels)
    image = pool.grab().toImage()
    gutter = image.pixelColor(4, image.height() - 4)
    assert gutter.lightness() < 80, gutter.name()  # no light gutter left on a dark panel
    sweep = window.page(SweepPage).view.graphics
    assert sweep.backgroundBrush().color().lightness() < 80  # the heatmap's background too
    window.menus.dark_action.trigger()
    qtbot.waitUntil(lambda: background_lightness() == LIGHT.background.lightness())
    qtbot.waitUntil(lambda: sweep.backgroundBrush().color().lightness() > 200)

