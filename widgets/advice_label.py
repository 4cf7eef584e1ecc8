"""The advice line the Sweep tab and the Compare page show (`profiling/trace/advice.py`): which way
of using the cores served the model better, hidden while the runs do not tell. A pair where a run
was starved of cores names no winner, and the line says which run and how to measure them paired.
Where the runs hold the fork or threads run's sequential 1×J and M 1×J, the line ends with its
speedup in parts ("1.67× = 1.65× from TorchScript's plan × 1.01× from 2 threads"), and with which
run of the pair ran on a busy machine ("(sequential 1×2 ran on a busy machine: re-run it on a quiet
one)", `advice.with_busy_note`), as the advice words it."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from branchscope.profiling.trace.advice import Measured, advice_record
from branchscope.profiling.trace.sweep_records import AdviceRecord


class AdviceLabel(QLabel):
    """"Advice: …" for the runs `show_runs` is given; hidden (and empty) when there is none.
    `what`: what a compared run is called where it is shown ("cell", "run"). `advice` is the advice
    shown (`records.AdviceRecord`), its reason in the tooltip."""

    def __init__(self, what: str, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._tip = (
            f"A sequential {what} and a fork or threads {what} of the same thread count compared: sequential I×J "
            "computes with J threads (its inter-op pool is idle), fork or threads I×J with I×J; within noise when "
            f"their step times' interquartile ranges overlap; no winner when either {what} was starved of cores "
            "(got fewer than its threads could use)."
        )
        self.setToolTip(self._tip)
        self.advice: AdviceRecord | None = None
        self.hide()

    def show_runs(self, runs: Sequence[Measured]) -> None:
        self.show_advice(advice_record(runs))

    def show_advice(self, advice: AdviceRecord | None) -> None:
        """Shows an advice made elsewhere (a sweep's: `sweep_text.sweep_advice`)."""
        self.advice = advice
        self.setText("" if advice is None else f"Advice: {advice.text}")
        self.setToolTip(self._tip if advice is None else f"{self._tip}\n\n{advice.reason}")
        self.setVisible(advice is not None)
