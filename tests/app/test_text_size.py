"""Issue 22, item 6: View › Larger and Smaller text scale every label of the window, monotonically,
those with a colour of their own included (a style sheet had pinned their font)."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from branchscope.app.pages.run_page import RunPage


def test_every_label_follows_larger_and_smaller_text(window, qtbot):
    controls = window.controls
    controls.threads_hint.setText("2 × 2 = 4 threads on 2 cores — oversubscribed when forked")
    labels = [controls.description, controls.threads_hint, window.page(RunPage).summary_line, window.page(RunPage).workspace.rows[0].title]
    base = QApplication.font().pointSizeF()

    def follow(size: float) -> None:  # Qt posts the font change to the widgets
        qtbot.waitUntil(lambda: [w.font().pointSizeF() for w in labels] == [size] * len(labels), timeout=30_000)

    follow(base)
    window.menus.scale_text(2)
    larger = QApplication.font().pointSizeF()
    assert larger > base
    follow(larger)
    window.menus.scale_text(-4)
    smaller = QApplication.font().pointSizeF()
    assert smaller < base
    follow(smaller)
    window.menus.scale_text(0)
    follow(base)
    assert window.page(RunPage).workspace.rows[0].title.font().bold()  # the row title keeps its weight
