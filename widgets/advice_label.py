"""The advice line the Sweep tab and the Compare page show (`profiling/trace/advice.py`): which way
of using the cores served the model better, hidden while the runs do not tell."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from branchscope.profiling.trace.advice import Measured, advice_line


class AdviceLabel(QLabel):
    """"Advice: …" for the runs `show_runs` is given; hidden (and empty) when there is none.
    `what`: what a compared run is called where it is shown ("cell", "run")."""

    def __init__(self, what: str, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setToolTip(
            f"A sequential {what} and a fork or threads {what} of the same thread count compared: sequential I×J "
            "computes with J threads (its inter-op pool is idle), fork or threads I×J with I×J; within noise when "
            "their step times' interquartile ranges overlap."
        )
        self.hide()

    def show_runs(self, runs: Sequence[Measured]) -> None:
        advice = advice_line(runs)
        self.setText("" if advice is None else f"Advice: {advice}")
        self.setVisible(advice is not None)
