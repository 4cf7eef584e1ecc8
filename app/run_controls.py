"""The run controls: model picker, mode, inter-op and intra-op sliders, processes (ranks of a
distributed run), steps, timeout, the worker's Python (`--python`: empty for branchscope's own),
Run/Cancel, progress.

The widget only says what to run: `runRequested(spec)` when Run is pressed, and never otherwise:
moving a slider, choosing a mode or a model, changing the processes, the steps or the worker's
Python starts nothing (a mis-picked item must not start a run nobody asked for). Setting values
from code (`set_values`) asks for nothing either, and neither does `follow`: the window sets the
controls to the run or folder it shows and says what that is ("opened from disk: …" when it was
read from disk), in one line cut to the panel's width, whole in its tooltip.
The sliders start at 1×1 (`DEFAULT_THREADS`); under them the chosen mode says how many threads
it computes with (`mode_traits.threads_words`, from the mode's traits). `cancelRequested` for
Cancel; `openModelRequested` for "Open model file…". A demo this machine cannot run
(`set_cuda_devices`) is listed greyed out, with why; so is a mode, before any run: one that needs
CUDA the machine lacks (`set_cuda_available`), or one the worker's Python cannot run
(`set_mode_problems`, from its probe: fork where TorchScript is off), its item's tooltip the mode's
own line of why. A chosen mode that turns out unavailable gives way to the mode offered instead
(`Mode.instead`: fork's is threads), and the progress bar says so.

Whoever runs it reports back through `show_started`, `show_phase` (the phase and its elapsed time,
ticking), `show_progress` and `show_idle` (the window wires these to the `RunController`).
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPalette, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractSlider,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSlider,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from branchscope.app.elided_lines import ElidedLines
from branchscope.app.run_controller import RunSpec
from branchscope.profiling.run.modes import BASELINE_MODE, MODES, mode_named, why_not_offered
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.trace.mode_traits import UNKNOWN, threads_words
from branchscope.widgets.theme import theme

#: What the progress bar says in each phase of a run (the runner's phase names).
PHASES = {
    "load": "loading the model…",
    "warmup": "warming up…",
    "timing": "timing steps…",
    "profile": "profiling steps…",
    "export": "writing the trace…",
}
DEFAULT_TIMEOUT_S = 600
#: The sliders' (inter-op, intra-op) when nothing (command line, code) sets them.
DEFAULT_THREADS = (1, 1)


#: The thread hint's colour when the threads oversubscribe the cores.
OVERSUBSCRIBED = QColor("#c0392b")
#: The colours of the shown line: for a run of this window of the model chosen, and for anything else.
RUN_HERE, FROM_ELSEWHERE = "#2c3e50", "#8a5a00"


def _tint(label: QLabel, color: QColor | None) -> None:
    """`label`'s text in `color` (None: the palette's muted colour) through its palette, never a
    style sheet: a style sheet pins the label's font, which then never follows View › Larger text."""
    palette = label.palette()
    palette.setColor(QPalette.ColorRole.WindowText, color if color is not None else theme().muted)
    label.setPalette(palette)


class RunControls(QWidget):
    """The model and run settings (see the module docstring)."""

    #: Run this `RunSpec`.
    runRequested = Signal(object)
    cancelRequested = Signal()
    openModelRequested = Signal()
    #: The user set the worker's Python (its path as written; "" for branchscope's own).
    pythonChanged = Signal(str)

    def __init__(self, demos: list, cores: int, parent: QWidget | None = None):
        super().__init__(parent)
        self.demos = demos
        self.cores = cores
        #: CUDA devices the worker sees (None: not known yet); see `set_cuda_devices`.
        self.cuda_devices: int | None = None
        #: Whether the modes that need CUDA can run, and why not (`set_cuda_available`).
        self._cuda: tuple[bool, str] = (False, "checking for CUDA…")
        #: The modes the worker's Python cannot run, with why (`set_mode_problems`).
        self.mode_problems: dict[str, str] = {}
        #: Ticks the elapsed time of the phase shown.
        self.phase_timer = QTimer(self)
        self.phase_timer.setInterval(100)
        self.phase_timer.timeout.connect(self._show_elapsed)
        self._clock = QElapsedTimer()
        self._phase_text = ""

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)

        model_box = QGroupBox("Model")
        ml = QVBoxLayout(model_box)
        #: What the window shows, and where it came from (`follow`): the controls below are set to
        #: it, and say so when it was read from disk rather than run here.
        self.shown_label = ElidedLines(1)
        self.shown_label.setObjectName("shownLabel")
        self.shown_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.shown_label.setVisible(False)
        ml.addWidget(self.shown_label)
        self.model_combo = QComboBox()
        for d in demos:
            self.model_combo.addItem(f"demo: {d.name}", ("demo", d.name))
            self.model_combo.setItemData(
                self.model_combo.count() - 1, d.description, Qt.ItemDataRole.ToolTipRole
            )
        default = next((k for k, d in enumerate(demos) if d.name == "inception"), 0)
        self.model_combo.setCurrentIndex(default)
        self.model_combo.currentIndexChanged.connect(self._update_description)
        self.description = QLabel()
        self.description.setWordWrap(True)
        _tint(self.description, None)
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
        for mode in MODES.values():
            self.mode_combo.addItem(mode.label, mode.name)
            self.mode_combo.setItemData(self.mode_combo.count() - 1, mode.description, Qt.ItemDataRole.ToolTipRole)
        self.mode_combo.currentIndexChanged.connect(lambda _i: self._update_thread_labels())
        form.addRow("Mode", self.mode_combo)
        # 1×1 unless told otherwise: the first run is the baseline the lesson starts from, and never
        # oversubscribes the machine (the window forks 2×1 after it: `MainWindow.start_first_run`).
        self.interop_slider, self.interop_label = self._slider(DEFAULT_THREADS[0])
        self.intra_slider, self.intra_label = self._slider(DEFAULT_THREADS[1])
        form.addRow("Inter-op", self._slider_row(self.interop_slider, self.interop_label))
        form.addRow("Intra-op", self._slider_row(self.intra_slider, self.intra_label))
        self.threads_hint = QLabel()
        self.threads_hint.setWordWrap(True)
        form.addRow("", self.threads_hint)
        self.nproc_spin = QSpinBox()
        self.nproc_spin.setRange(1, max(8, 2 * cores))
        self.nproc_spin.setValue(1)
        self.nproc_spin.setToolTip(
            "processes (ranks): more than 1 runs the model distributed with torch.distributed.run on this "
            "machine (gloo on CPU, nccl on GPUs), each rank with the threads above"
        )
        form.addRow("Processes", self.nproc_spin)
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 500)
        self.steps_spin.setValue(5)
        self.steps_spin.setToolTip("profiled steps (after warm-up)")
        form.addRow("Steps", self.steps_spin)
        self.timeout_spin = QSpinBox()
        self.timeout_spin.setRange(1, 24 * 3600)
        self.timeout_spin.setValue(DEFAULT_TIMEOUT_S)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setToolTip("stop the run after this many seconds (the runner's --timeout)")
        form.addRow("Timeout", self.timeout_spin)
        self.python_edit = QLineEdit()
        self.python_edit.setPlaceholderText("branchscope's own")
        self.python_edit.setClearButtonEnabled(True)
        self.python_edit.setToolTip(
            "the Python the worker runs under (--python): your environment's bin/python, with your torch and "
            "your model's dependencies; branchscope need not be installed there. Empty: branchscope's own"
        )
        self.python_edit.editingFinished.connect(self._python_edited)
        self.python_button = choose_python = QToolButton()
        choose_python.setText("…")
        choose_python.setToolTip("choose the worker's Python executable")
        choose_python.clicked.connect(self._choose_python)
        python_row = QWidget()
        python_lay = QHBoxLayout(python_row)
        python_lay.setContentsMargins(0, 0, 0, 0)
        python_lay.addWidget(self.python_edit, 1)
        python_lay.addWidget(choose_python)
        form.addRow("Python", python_row)
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

        self.set_cuda_devices(None)
        self._update_description()
        self._update_thread_labels()
        #: The worker's Python last said (`pythonChanged`) or set from code.
        self._python_said = self.python()

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
        options = RunOptions(
            steps=self.steps_spin.value(),
            timeout=float(self.timeout_spin.value()),
            nproc=self.nproc_spin.value(),
            python=self.python(),
        )
        if data[0] == "demo":
            options = options.replace(demo=data[1])
        else:
            options = options.replace(model=Path(data[1]), input_shapes=tuple(data[2]) if len(data) > 2 else ())
        return RunSpec(self.mode_combo.currentData(), self.interop_slider.value(), self.intra_slider.value(), options)

    def python(self) -> Path | None:
        """The worker's Python the controls name (~ expanded); None: branchscope's own."""
        text = self.python_edit.text().strip()
        return Path(os.path.expanduser(text)) if text else None

    def request_run(self) -> bool:
        """Ask for a run of what the controls show, now; False (and why, in the progress bar) when
        the chosen model cannot run on this machine."""
        spec = self.spec()
        reason = self.unavailable_reason()
        if reason:
            self.progress.setFormat(reason)
            return False
        self.runRequested.emit(spec)
        return True

    def set_values(
        self,
        *,
        demo: str | None = None,
        mode: str | None = None,
        interop: int | None = None,
        intra: int | None = None,
        steps: int | None = None,
        timeout: float | None = None,
        nproc: int | None = None,
        python: str | Path | None = None,
    ) -> None:
        """Set the controls without asking for a run; ValueError for a demo or mode there is not.
        `python=""` sets the worker's Python back to branchscope's own."""
        if demo is not None:
            k = self._model_index("demo", demo)
            if k < 0:
                raise ValueError(
                    f"no demo named {demo!r}; the demos are: {', '.join(d.name for d in self.demos)}"
                )
            self.model_combo.setCurrentIndex(k)
        if mode is not None:
            try:
                name = mode_named(mode).name
            except KeyError:
                raise ValueError(f"no mode {mode!r}") from None
            self.mode_combo.setCurrentIndex(self.mode_combo.findData(name))
            self._leave_unavailable_mode()
        if interop is not None:
            self.interop_slider.setMaximum(max(self.interop_slider.maximum(), interop))
            self.interop_slider.setValue(interop)
        if intra is not None:
            self.intra_slider.setMaximum(max(self.intra_slider.maximum(), intra))
            self.intra_slider.setValue(intra)
        if steps is not None:
            self.steps_spin.setValue(steps)
        if timeout is not None:
            self.timeout_spin.setValue(max(1, round(timeout)))
        if nproc is not None:
            self.nproc_spin.setMaximum(max(self.nproc_spin.maximum(), nproc))
            self.nproc_spin.setValue(nproc)
        if python is not None:
            self.python_edit.setText(os.fspath(python))
            self._python_said = self.python()

    def follow(
        self,
        text: str,
        *,
        from_disk: bool = False,
        model: tuple | None = None,
        mode: str | None = None,
        threads: tuple[int, int] | None = None,
        steps: int | None = None,
        nproc: int | None = None,
        apply: bool = True,
    ) -> bool:
        """Say what the window shows (`text`, e.g. "opened from disk: runs/x — inception · fork · 2×1")
        and set the controls to its configuration, asking for no run. `model` is the picker's item
        for it (("demo", name), ("file", path, shapes)): chosen only when it is listed, never added
        (a path a run.json names is not a model to run). When the picker does not name what is
        shown (a run's or a trace's, `from_disk`), the text says so. With `apply` False, or while a
        slider is held down, only the text changes.
        Returns whether the picker names the model shown."""
        k = self._model_index(*model[:2]) if model else -1
        if k >= 0 and len(model or ()) > 2:  # a model file: with the same input shapes
            data = self.model_combo.itemData(k)
            k = k if tuple(data[2] if len(data) > 2 else ()) == tuple(model[2]) else -1  # type: ignore[index]
        if apply and not self._slider_held():
            if k >= 0:
                self.model_combo.setCurrentIndex(k)
            if mode is not None and self.mode_combo.findData(mode) >= 0:
                self.mode_combo.setCurrentIndex(self.mode_combo.findData(mode))
                self._leave_unavailable_mode()
            if threads is not None and min(threads) >= 1:
                self.set_values(interop=threads[0], intra=threads[1])
            if steps is not None and steps >= 1:
                self.set_values(steps=min(steps, self.steps_spin.maximum()))
            if nproc is not None and nproc >= 1:
                self.set_values(nproc=nproc)
        named = k >= 0 and self.model_combo.currentIndex() == k
        if text and not named and (model is not None or from_disk):
            text += f" — not a run of {self.model_combo.currentText()} (what Run runs)"
        self.shown_label.set_plain(text, FROM_ELSEWHERE if from_disk or not named else RUN_HERE)
        return named

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

    def set_cuda_available(self, available: bool, reason: str) -> None:
        """Offer the modes that need CUDA or not; `reason` is the tooltip saying why not."""
        self._cuda = (available, reason)
        self._offer_modes()

    def set_mode_problems(self, problems: dict[str, str], python: Path | None = None) -> None:
        """The modes the worker's Python (`python`, None: branchscope's own) cannot run, each with its
        line of why (`app/mode_check.py`, before any run): greyed out, the line their tooltip; a chosen
        one gives way to the mode offered instead. An answer about another Python than the one the
        controls name now is not taken (its own answer follows)."""
        if python != self.python():
            return
        self.mode_problems = dict(problems)
        self._offer_modes()
        self._leave_unavailable_mode()

    def mode_reason(self, name: str) -> str:
        """Why the mode `name` cannot be chosen here ("" when it can): it needs CUDA this machine
        lacks, or the worker's Python cannot run it."""
        mode = MODES.get(name)
        return "" if mode is None else why_not_offered(mode, self._cuda, self.mode_problems)

    def _offer_modes(self) -> None:
        """Each mode's item enabled or greyed out with why (`mode_reason`); the combo's tooltip sums up."""
        model = self.mode_combo.model()
        for k, mode in enumerate(MODES.values()):
            reason = self.mode_reason(mode.name)
            if isinstance(model, QStandardItemModel):
                item = model.item(k)
                item.setEnabled(not reason)
                item.setToolTip(reason or mode.description)
                item.setText(mode.label + (" — cannot run here" if mode.name in self.mode_problems else ""))
        no_cuda = [m.traits.title for m in MODES.values() if m.needs_cuda and not self._cuda[0]]
        lines = [f"{', '.join(no_cuda)}: needs CUDA: {self._cuda[1]}"] if no_cuda else []
        self.mode_combo.setToolTip("\n".join([*lines, *self.mode_problems.values()]))

    def _leave_unavailable_mode(self) -> None:
        """The chosen mode cannot run with the worker's Python: choose the one it offers instead (else
        the baseline), and say so in the progress bar (no run is asked for)."""
        name = self.mode_combo.currentData()
        why = self.mode_problems.get(name)
        if not why:
            return
        mode = MODES[name]
        instead = next((m for m in (mode.instead, BASELINE_MODE) if m in MODES and not self.mode_reason(m)), None)
        if instead is None:
            return
        self.mode_combo.setCurrentIndex(self.mode_combo.findData(instead))
        self.progress.setFormat(f"{mode.traits.title} cannot run here: {MODES[instead].traits.title} chosen instead")
        self.progress.setToolTip(why)

    def set_cuda_devices(self, count: int | None) -> None:
        """How many CUDA devices the worker sees (None: not known yet, e.g. still checking). Demos
        that need more are listed greyed out, saying why (item text and tooltip)."""
        self.cuda_devices = count
        model = self.model_combo.model()
        for demo in self.demos:
            k = self._model_index("demo", demo.name)
            if k < 0 or not isinstance(model, QStandardItemModel):
                continue
            reason = self._demo_reason(demo)
            item = model.item(k)
            item.setEnabled(not reason)
            item.setText(f"demo: {demo.name}" + (f" (needs {self._devices(demo)})" if reason else ""))
            item.setToolTip(f"{reason}\n{demo.description}" if reason else demo.description)
        self._update_run_button()

    @staticmethod
    def _devices(demo) -> str:
        need = getattr(demo, "requires_cuda_devices", 0)
        return f"{need} CUDA device{'s' if need != 1 else ''}"

    def _demo_reason(self, demo) -> str:
        need = int(getattr(demo, "requires_cuda_devices", 0) or 0)
        if need <= 0:
            return ""
        if self.cuda_devices is None:
            return f"{demo.name} needs {self._devices(demo)}; checking what this machine has…"
        if self.cuda_devices < need:
            return f"{demo.name} needs {self._devices(demo)}; this machine has {self.cuda_devices}"
        return ""

    def unavailable_reason(self) -> str:
        """Why the chosen model cannot run here ("" when it can)."""
        data = self.model_combo.currentData()
        if data and data[0] == "demo":
            for d in self.demos:
                if d.name == data[1]:
                    return self._demo_reason(d)
        return ""

    # ---- the user's changes -----------------------------------------------------------------
    def _python_edited(self) -> None:
        """The Python line was left (Return, focus elsewhere): `pythonChanged` if it changed (no run)."""
        if self.python() != self._python_said:
            self._python_said = self.python()
            self.pythonChanged.emit(self.python_edit.text().strip())

    def _choose_python(self) -> None:
        start = os.fspath(self.python() or Path.home())
        path, _filter = QFileDialog.getOpenFileName(self, "The worker's Python", start)
        if path:
            self.python_edit.setText(path)
            self._python_edited()

    def _slider_held(self) -> bool:
        none = QAbstractSlider.SliderAction.SliderNoAction
        return any(
            s.isSliderDown() or s.repeatAction() != none for s in (self.interop_slider, self.intra_slider)
        )

    # ---- the run going on -------------------------------------------------------------------
    def show_started(self, spec: RunSpec) -> None:
        self.progress.setRange(0, max(1, spec.options.steps))
        self.progress.setValue(0)
        self.cancel_button.setEnabled(True)
        self._start_phase(f"{spec.model_label} · {spec.mode}: starting worker…")

    def show_phase(self, phase: str) -> None:
        """The run entered `phase` (the runner's name for it): say so, with the time spent in it."""
        self.progress.setValue(0)
        self._start_phase(PHASES.get(phase, f"{phase}…"))

    def show_progress(self, step: int, of: int) -> None:
        self.phase_timer.stop()
        self.progress.setRange(0, max(1, of))
        self.progress.setValue(min(step, of))
        self.progress.setFormat(f"step {step} of {of}")

    def show_idle(self, text: str) -> None:
        """No run going on; `text` ("done", "failed", "cancelled") says how the last one ended."""
        self.phase_timer.stop()
        self.cancel_button.setEnabled(False)
        self.progress.setRange(0, 1)
        self.progress.setValue(1 if text == "done" else 0)
        self.progress.setFormat(text)

    def _start_phase(self, text: str) -> None:
        self._phase_text = text
        self._clock.start()
        self._show_elapsed()
        self.phase_timer.start()

    def _show_elapsed(self) -> None:
        self.progress.setFormat(f"{self._phase_text} {self._clock.elapsed() / 1000:.1f} s")

    # ---- internals --------------------------------------------------------------------------
    def changeEvent(self, ev: QEvent) -> None:  # noqa: N802 (Qt API)
        super().changeEvent(ev)
        if ev.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and hasattr(self, "threads_hint"):
            _tint(self.description, None)  # the muted colour of the palette now (View › Dark palette)
            self._update_thread_labels()

    def _update_thread_labels(self) -> None:
        a, b = self.interop_slider.value(), self.intra_slider.value()
        self.interop_label.setText(str(a))
        self.intra_label.setText(str(b))
        self.interop_slider.setToolTip(f"inter-op threads (torch.set_num_interop_threads): {a}")
        self.intra_slider.setToolTip(f"intra-op threads (torch.set_num_threads): {b}")
        mode = MODES.get(self.mode_combo.currentData())
        text, over = threads_words(mode.traits if mode is not None else UNKNOWN, a, b, self.cores)
        self.threads_hint.setText(text)
        _tint(self.threads_hint, OVERSUBSCRIBED if over else None)

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
        self._update_run_button()

    def _update_run_button(self) -> None:
        if not hasattr(self, "run_button"):
            return
        reason = self.unavailable_reason()
        self.run_button.setEnabled(not reason)
        self.run_button.setToolTip(reason)

