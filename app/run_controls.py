"""The run controls: model picker, mode, inter-op and intra-op sliders, steps, Run/Cancel, progress.

The widget only says what to run: `runRequested(spec)` when Run is pressed, a thread slider is
released, or another mode or model is chosen; `cancelRequested` for Cancel; `openModelRequested`
for "Open model file…". Whoever runs it reports back through `show_started`, `show_progress` and
`show_idle` (the window wires these to the `RunController`).
"""

from __future__ import annotations

import os

import psutil
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from branchscope.app.run_controller import RunSpec

MODES = [("sequential", "sequential"), ("fork", "fork (inter-op pool)"), ("streams", "multi-stream (CUDA)")]


class RunControls(QWidget):
    """The model and run settings (see the module docstring)."""

    #: Run this `RunSpec`.
    runRequested = Signal(object)
    cancelRequested = Signal()
    openModelRequested = Signal()

    def __init__(self, demos: list, cores: int, parent: QWidget | None = None):
        super().__init__(parent)
        self.demos = demos
        self.cores = cores
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)

        model_box = QGroupBox("Model")
        ml = QVBoxLayout(model_box)
        self.model_combo = QComboBox()
        for d in demos:
            self.model_combo.addItem(f"demo: {d.name}", ("demo", d.name))
            self.model_combo.setItemData(
                self.model_combo.count() - 1, d.description, Qt.ItemDataRole.ToolTipRole
            )
        default = next((k for k, d in enumerate(demos) if d.name == "inception"), 0)
        self.model_combo.setCurrentIndex(default)
        self.model_combo.activated.connect(self._on_model_activated)
        self.model_combo.currentIndexChanged.connect(self._update_description)
        self.description = QLabel()
        self.description.setWordWrap(True)
        self.description.setStyleSheet("color: #4a5560;")
        open_model = QPushButton("Open model file…")
        open_model.clicked.connect(self.openModelRequested)
        ml.addWidget(self.model_combo)
        ml.addWidget(self.description)
        ml.addWidget(open_model)
        lay.addWidget(model_box)

        run_box = QGroupBox("Run")
        form = QFormLayout(run_box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.mode_combo = QComboBox()
        for key, title in MODES:
            self.mode_combo.addItem(title, key)
        self.mode_combo.activated.connect(lambda _i: self.request_run())
        form.addRow("Mode", self.mode_combo)
        physical = psutil.cpu_count(logical=False) or cores
        self.interop_slider, self.interop_label = self._slider(cores)
        self.intra_slider, self.intra_label = self._slider(min(physical, cores))
        form.addRow("Inter-op", self._slider_row(self.interop_slider, self.interop_label))
        form.addRow("Intra-op", self._slider_row(self.intra_slider, self.intra_label))
        self.threads_hint = QLabel()
        self.threads_hint.setWordWrap(True)
        form.addRow("", self.threads_hint)
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 500)
        self.steps_spin.setValue(5)
        self.steps_spin.setToolTip("profiled steps (after warm-up)")
        form.addRow("Steps", self.steps_spin)
        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(lambda: self.request_run())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancelRequested)
        buttons.addWidget(self.run_button, 1)
        buttons.addWidget(self.cancel_button)
        form.addRow(buttons)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("idle")
        self.progress.setTextVisible(True)
        form.addRow(self.progress)
        lay.addWidget(run_box)

        self._update_description()
        self._update_thread_labels()

    def _slider(self, value: int) -> tuple[QSlider, QLabel]:
        s = QSlider(Qt.Orientation.Horizontal)
        s.setRange(1, 2 * self.cores)
        s.setValue(max(1, min(value, 2 * self.cores)))
        s.setPageStep(1)
        s.setTickPosition(QSlider.TickPosition.TicksBelow)
        s.setTickInterval(1)
        label = QLabel()
        label.setMinimumWidth(24)
        s.valueChanged.connect(self._update_thread_labels)
        s.sliderReleased.connect(self.request_run)
        return s, label

    @staticmethod
    def _slider_row(slider: QSlider, label: QLabel) -> QWidget:
        w = QWidget()
        h = QHBoxLayout(w)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(slider, 1)
        h.addWidget(label)
        return w

    # ---- what to run ------------------------------------------------------------------------
    def spec(self) -> RunSpec:
        """The run the controls describe."""
        data = self.model_combo.currentData() or ("demo", "inception")
        common = dict(
            mode=self.mode_combo.currentData(),
            interop=self.interop_slider.value(),
            intra=self.intra_slider.value(),
            steps=self.steps_spin.value(),
        )
        if data[0] == "demo":
            return RunSpec(demo=data[1], **common)
        return RunSpec(model=data[1], input_shapes=tuple(data[2]) if len(data) > 2 else (), **common)

    def request_run(self) -> None:
        self.runRequested.emit(self.spec())

    def set_values(
        self,
        *,
        demo: str | None = None,
        mode: str | None = None,
        interop: int | None = None,
        intra: int | None = None,
        steps: int | None = None,
    ) -> None:
        """Set the controls without asking for a run; ValueError for a demo or mode there is not."""
        if demo is not None:
            k = self._model_index("demo", demo)
            if k < 0:
                raise ValueError(
                    f"no demo named {demo!r}; the demos are: {', '.join(d.name for d in self.demos)}"
                )
            self.model_combo.setCurrentIndex(k)
        if mode is not None:
            k = self.mode_combo.findData("streams" if mode == "multi-stream" else mode)
            if k < 0:
                raise ValueError(f"no mode {mode!r}")
            self.mode_combo.setCurrentIndex(k)
        if interop is not None:
            self.interop_slider.setMaximum(max(self.interop_slider.maximum(), interop))
            self.interop_slider.setValue(interop)
        if intra is not None:
            self.intra_slider.setMaximum(max(self.intra_slider.maximum(), intra))
            self.intra_slider.setValue(intra)
        if steps is not None:
            self.steps_spin.setValue(steps)

    def add_model_file(self, path: str, input_shapes: tuple[str, ...] = ()) -> None:
        """Add a model file to the picker and choose it (without asking for a run)."""
        self.model_combo.addItem(f"file: {os.path.basename(path)}", ("file", path, tuple(input_shapes)))
        self.model_combo.setItemData(self.model_combo.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        self.model_combo.setCurrentIndex(self.model_combo.count() - 1)

    def _model_index(self, kind: str, name: str) -> int:
        for k in range(self.model_combo.count()):
            data = self.model_combo.itemData(k)
            if data and data[0] == kind and data[1] == name:
                return k
        return -1

    def set_streams_enabled(self, enabled: bool, reason: str) -> None:
        """Offer multi-stream or not; `reason` is the tooltip saying why not."""
        model = self.mode_combo.model()
        if isinstance(model, QStandardItemModel):
            item = model.item(2)
            item.setEnabled(enabled)
            item.setToolTip("one CUDA stream per branch" if enabled else reason)
        self.mode_combo.setToolTip("" if enabled else f"multi-stream: {reason}")

    # ---- the run going on -------------------------------------------------------------------
    def show_started(self, spec: RunSpec) -> None:
        self.progress.setRange(0, max(1, spec.steps))
        self.progress.setValue(0)
        self.progress.setFormat(f"{spec.model_label} · {spec.mode}: starting worker…")
        self.cancel_button.setEnabled(True)

    def show_progress(self, step: int, of: int) -> None:
        self.progress.setRange(0, max(1, of))
        self.progress.setValue(min(step, of))
        self.progress.setFormat(f"step {step} of {of}")

    def show_idle(self, text: str) -> None:
        """No run going on; `text` ("done", "failed", "cancelled") says how the last one ended."""
        self.cancel_button.setEnabled(False)
        self.progress.setRange(0, 1)
        self.progress.setValue(1 if text == "done" else 0)
        self.progress.setFormat(text)

    # ---- internals --------------------------------------------------------------------------
    def _update_thread_labels(self) -> None:
        a, b = self.interop_slider.value(), self.intra_slider.value()
        self.interop_label.setText(str(a))
        self.intra_label.setText(str(b))
        self.interop_slider.setToolTip(f"inter-op threads (torch.set_num_interop_threads): {a}")
        self.intra_slider.setToolTip(f"intra-op threads (torch.set_num_threads): {b}")
        over = a * b > self.cores
        self.threads_hint.setText(
            f"{a} × {b} = {a * b} threads on {self.cores} cores"
            + (" — oversubscribed when forked" if over else "")
        )
        self.threads_hint.setStyleSheet("color: #c0392b;" if over else "color: #5b6570;")

    def _update_description(self) -> None:
        data = self.model_combo.currentData()
        text = ""
        if data and data[0] == "demo":
            for d in self.demos:
                if d.name == data[1]:
                    text = d.description
        elif data:
            text = f"Model file {data[1]}" + (
                f", inputs {' '.join(data[2])}" if len(data) > 2 and data[2] else ""
            )
        self.description.setText(text)

    def _on_model_activated(self, _index: int) -> None:
        self._update_description()
        self.request_run()
