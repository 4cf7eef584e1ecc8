"""The window's Sweep tab: sweep the model the run controls describe over modes and thread counts,
and read the result as a heatmap.

The form says which modes, which inter-op and intra-op counts (comma-separated) and how many passes
(each cell once per pass, round-robin: `profiling/run/sweep.py`); Start runs
`branchscope sweep` through a `SweepController` (every cell a fresh worker, into a new folder of the
runs folder), the heatmap (`widgets/sweep_view.py`) fills as cells finish, and Cancel keeps the
finished cells (shown as sweep.json has them once the sweep's process has stopped). A click on a
cell asks the window to show its run (`runChosen`), a second click to compare the two
(`compareRequested`). `open_sweep` shows a sweep folder written earlier. The status line names the
best cell, or every cell within noise of it ("best: fork 2×1, sequential 1×1 (within noise of each
other)"), a cell starved of cores said so. Under it, one line says which way of using the cores
served the model better (`profiling/trace/advice.py`: a sequential and a fork cell of the same
thread count; no winner beside a starved cell; the fork or threads cell's speedup in parts where its
sequential 1×J and M 1×J cells finished), or which cell would tell, as cells finish; it ends
with which of the two cells ran on a busy machine (`sweep_text.sweep_advice`).

How long: beside Start, before it is pressed, what the form's sweep will take (its cells × passes
runs at a run's guessed time: from an earlier run of the model, `earlier_run`, else from its
steps; `profiling/run/sweep_eta.py`); while it runs, which cell and pass is running and the time
left, from the runs that finished ("cell 3 of 8 · about 2 min left"), refreshed every second.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from branchscope.app.runs import RunSpec
from branchscope.app.sweep_controller import SweepController
from branchscope.profiling.run.modes import MODES, why_not_offered
from branchscope.profiling.run.sweep import (
    DEFAULT_PASSES,
    SweepError,
    SweepRequest,
    load_sweep,
)
from branchscope.profiling.run.sweep_eta import SweepClock, plan_text
from branchscope.profiling.trace.events import CellEvent
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.sweep_records import DONE, SweepRecord
from branchscope.profiling.trace.sweep_text import best_text, cell_text, sweep_advice
from branchscope.widgets.advice_label import AdviceLabel
from branchscope.widgets.sweep_view import SweepView

#: The modes a sweep checks at first: the baseline and every mode whose traits run the branches on a
#: pool of threads without CUDA (fork, threads: read from the registry), so that a model TorchScript
#: cannot compile for fork still gets a parallel run from threads.
DEFAULT_MODES = tuple(
    name for name, m in MODES.items() if m.traits.baseline or (m.traits.branch_pool and not m.needs_cuda)
)


def parse_counts(text: str) -> tuple[int, ...]:
    """"1, 2,4" -> (1, 2, 4); raises ValueError with a sentence for anything but counts from 1 to 64."""
    values: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= 64:
            raise ValueError(f"{part!r} is not a thread count from 1 to 64")
        if int(part) not in values:
            values.append(int(part))
    if not values:
        raise ValueError("give at least one thread count, e.g. 1,2")
    return tuple(values)


class SweepPanel(QWidget):
    """The Sweep tab (see the module docstring)."""

    #: A finished cell was clicked: its run folder.
    runChosen = Signal(str)
    #: Two finished cells were clicked one after the other: their run folders.
    compareRequested = Signal(str, str)
    #: A cell double-clicked: its run folder, to open on the Run page.
    runActivated = Signal(str)

    def __init__(
        self,
        spec_of: Callable[[], RunSpec],
        new_folder: Callable[[str], Path],
        cores: int,
        controller: SweepController | None = None,
        parent: QWidget | None = None,
        earlier_run: Callable[[RunSpec], RunRecord | None] | None = None,
    ):
        super().__init__(parent)
        self.spec_of = spec_of
        self.new_folder = new_folder
        #: An earlier run of a spec's model (its run.json), whose time is a run's guessed time.
        self.earlier_run = earlier_run or (lambda _spec: None)
        #: The running sweep's clock (None while none runs), and the cell and pass running.
        self.clock: SweepClock | None = None
        self._running: tuple[int, int] = (0, 1)
        self.controller = controller if controller is not None else SweepController(self)
        self.controller.setParent(self)
        #: The folder of the sweep shown.
        self.folder: Path | None = None

        form = self._form(cores)
        self.view = SweepView()
        self.view.cellChosen.connect(self.runChosen)
        self.view.cellActivated.connect(self.runActivated)
        self.view.compareRequested.connect(self.compareRequested)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(self.status)
        lay.addWidget(self.advice)
        lay.addWidget(self.view, 1)

        self._follow_controller()
        self.show_plan()

    def _form(self, cores: int) -> QFormLayout:
        """The sweep's form: the modes, the thread counts, the passes, Start and Cancel, and the estimate."""
        self.mode_boxes = {name: QCheckBox(name) for name in MODES}
        #: Whether the modes that need CUDA can run, and why not; the modes the worker's Python cannot run.
        self._cuda: tuple[bool, str] = (False, "checking for CUDA…")
        self._mode_problems: dict[str, str] = {}
        for name, box in self.mode_boxes.items():
            box.setToolTip(MODES[name].description)
            box.setChecked(name in DEFAULT_MODES)
        self.set_cuda_available(False, "checking for CUDA…")
        counts = ",".join(str(n) for n in sorted({1, 2, max(1, cores)}))
        self.interop_edit = QLineEdit(counts)
        self.intra_edit = QLineEdit(counts)
        for edit in (self.interop_edit, self.intra_edit):
            edit.setToolTip("thread counts separated by commas, e.g. 1,2,4")
            edit.setMaximumWidth(240)  # a few numbers, not the tab's width
        self.passes_spin = QSpinBox()
        self.passes_spin.setRange(1, 20)
        self.passes_spin.setValue(DEFAULT_PASSES)
        self.passes_spin.setMaximumWidth(80)
        self.passes_spin.setToolTip(
            "every cell runs this many times, round-robin (each a fresh worker); a cell's figure is the "
            "median over its passes, so drift between runs is not taken for a difference"
        )
        self.start_button = QPushButton("Start sweep")
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.controller.cancel)
        self.status = QLabel(
            "Runs the model chosen on the left once per mode × inter-op × intra-op, each in a fresh worker."
        )
        self.status.setWordWrap(True)
        #: How long the form's sweep will take, or the running one has left.
        self.estimate = QLabel()
        self.estimate.setWordWrap(True)  # a long estimate wraps: it must not widen the window (1280×720)
        self._ticker = QTimer(self)
        self._ticker.setInterval(1000)
        self._ticker.timeout.connect(self._show_time_left)
        #: Which way of using the cores served the model better (empty and hidden until a sweep says).
        self.advice = AdviceLabel("cell")

        modes = QHBoxLayout()
        for box in self.mode_boxes.values():
            modes.addWidget(box)
        modes.addStretch(1)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.estimate)
        buttons.addStretch(1)
        form = QFormLayout()
        form.addRow("Modes", modes)
        form.addRow("Inter-op threads", self.interop_edit)
        form.addRow("Intra-op threads", self.intra_edit)
        form.addRow("Passes", self.passes_spin)
        form.addRow(buttons)
        return form

    def _follow_controller(self) -> None:
        """The sweep's progress from the controller; the estimate from the form's every change."""
        c = self.controller
        c.started.connect(self._on_update)
        c.cellFinished.connect(self._on_cell)
        c.cellsSkipped.connect(self._on_skipped)
        c.finished.connect(self._on_finished)
        c.failed.connect(self._on_failed)
        c.canceled.connect(self._on_canceled)
        c.stopped.connect(self._on_stopped)
        c.progress.connect(self._on_progress)
        for box in self.mode_boxes.values():
            box.toggled.connect(self.show_plan)
        self.interop_edit.textChanged.connect(self.show_plan)
        self.intra_edit.textChanged.connect(self.show_plan)
        self.passes_spin.valueChanged.connect(self.show_plan)

    def set_cuda_available(self, available: bool, reason: str) -> None:
        """Modes that need CUDA are offered only where the worker finds it (`reason`: why not)."""
        self._cuda = (available, reason)
        self._offer_modes()

    def set_mode_problems(self, problems: dict[str, str]) -> None:
        """Modes the worker's Python cannot run (`app/mode_check.py`: fork where TorchScript is off),
        with why: unticked and greyed out, the line their tooltip. A sweep started before the answer
        skips their cells itself (`sweep.modes_skipped`), and the heatmap marks them."""
        self._mode_problems = dict(problems)
        self._offer_modes()

    def _offer_modes(self) -> None:
        """Each mode's box offered, or unticked and greyed out saying why (no CUDA, or its Python)."""
        for name, box in self.mode_boxes.items():
            mode = MODES[name]
            why = why_not_offered(mode, self._cuda, self._mode_problems)
            was = box.isEnabled()
            box.setEnabled(not why)
            box.setToolTip(why or mode.description)
            if why:
                box.setChecked(False)
            elif not was and name in DEFAULT_MODES:
                box.setChecked(True)  # offered again (another Python): ticked as at first

    # ---- how long -------------------------------------------------------------------------
    def show_plan(self) -> None:
        """Beside Start while no sweep runs: how long the form's sweep would take."""
        if self.clock is not None:
            return
        try:
            request = self._request(out=Path())
        except (ValueError, OSError):
            self.estimate.setText("")
            return
        clock = SweepClock.of(request, self.earlier_run(self.spec_of()))
        plan = plan_text(clock.cells, clock.passes, clock.guess_s)
        self.estimate.setText(f"{plan} (a guess until a cell finishes)")

    def _on_progress(self, index: int, _step: int, _of: int) -> None:
        cell, sweep_pass = self._running
        if index < cell:  # the cells begin again: the next pass
            sweep_pass += 1
        self._running = (index, sweep_pass)
        self._show_time_left()

    def _show_time_left(self) -> None:
        """"cell 3 of 8 · pass 2 of 3 · about 2 min left" while a sweep runs."""
        clock = self.clock
        if clock is None:
            return
        cell, sweep_pass = self._running
        where = f"cell {cell + 1} of {clock.cells}" + (f" · pass {sweep_pass} of {clock.passes}" if clock.passes > 1 else "")
        left = clock.text()
        self.estimate.setText(f"{where} · {left}" if left else where)

    def _stop_clock(self) -> None:
        self.clock = None
        self._ticker.stop()
        self.show_plan()

    # ---- running ----------------------------------------------------------------------------
    def request(self) -> SweepRequest:
        """The sweep the form describes for the model of the run controls (ValueError: what is wrong)."""
        return self._request()

    def _request(self, out: Path | None = None) -> SweepRequest:
        """`request`, into `out` when given (no new folder is made for it)."""
        modes = tuple(m for m, box in self.mode_boxes.items() if box.isChecked())
        if not modes:
            raise ValueError("choose at least one mode")
        interop, intra = parse_counts(self.interop_edit.text()), parse_counts(self.intra_edit.text())
        spec = self.spec_of()
        out = out if out is not None else self.new_folder(f"sweep-{spec.model_label}")
        return SweepRequest(out=out, modes=modes, interop=interop, intra=intra, options=spec.options,
                            passes=self.passes_spin.value())  # fmt: skip

    def start(self) -> bool:
        """Start the sweep the form describes; False (and why, in the status line) if it cannot."""
        try:
            request = self.request()
        except (ValueError, OSError) as exc:
            self.status.setText(f"not started: {exc}")
            return False
        self.folder = request.out
        self._show(SweepRecord(), request.out)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.clock = SweepClock.of(request, self.earlier_run(self.spec_of()))
        self._running = (0, 1)
        self._ticker.start()
        self._show_time_left()
        plan = plan_text(self.clock.cells, self.clock.passes, self.clock.guess_s)
        self.status.setText(f"sweeping {plan} into {request.out}…")
        self.controller.start(request)  # last: a sweep that cannot start says so inside it
        return True

    def _on_update(self, _sweep: SweepRecord | None = None) -> None:
        if self.controller.sweep is not None and self.folder is not None:
            self._show(self.controller.sweep, self.folder)

    def _show(self, sweep: SweepRecord, folder: str | Path) -> None:
        """The sweep in the heatmap, and its advice under the status line."""
        self.view.set_sweep(sweep, folder)
        self.advice.show_advice(sweep_advice(sweep))

    def _on_skipped(self, sweep: SweepRecord) -> None:
        """The sweep skips the cells of a mode its Python cannot run: shown marked, said, not counted."""
        self._on_update()
        skipped = [c for c in sweep.cells if c.skipped]
        if self.clock is not None:
            self.clock.leave_out(len(skipped))
            self._show_time_left()
        self.status.setText(f"skipping {len(skipped)} cell{'s' if len(skipped) != 1 else ''}: {skipped[0].skipped}")

    def _on_cell(self, event: CellEvent) -> None:
        self._on_update()
        median = event.cell.unprofiled_median_ms
        result = f"{median:.2f} ms" if median is not None else f"failed: {event.cell.error}"
        result += f" ({event.cell.load_word})" if median is not None and event.cell.load_word else ""
        where = f"pass {event.sweep_pass}/{event.passes} " if (event.passes or 1) > 1 and event.sweep_pass else ""
        self.status.setText(f"{where}cell {event.index + 1}/{event.of} {event.cell.label}: {result}")
        if self.clock is not None:
            self.clock.run_done(event.sweep_pass, event.cell.status != DONE)
            self._show_time_left()

    def _idle(self, text: str) -> None:
        self._stop_clock()
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.status.setText(text)

    def _on_finished(self, out: str) -> None:
        self.open_sweep(out)
        self._idle(f"done: {self._best_text()} · {out}")

    def _on_failed(self, message: str) -> None:
        self._idle(f"sweep failed: {message}")

    def _on_canceled(self, out: str) -> None:
        """At once: a new sweep may start while this one's process stops (`_on_stopped` follows)."""
        self._idle(f"cancelling; the finished cells are kept in {out}")

    def _on_stopped(self, out: str) -> None:
        """The cancelled sweep's sweep.json is final: shown, unless another sweep has started since."""
        if self.controller.is_running() or self.folder is None or self.folder != Path(out):
            return
        self.open_sweep(out, quiet=True)
        self._idle(f"cancelled; the finished cells are kept in {out}")

    def _best_text(self) -> str:
        sweep = self.view.sweep
        best = sweep.best
        if best is None or not 0 <= best < len(sweep.cells) or sweep.cells[best].unprofiled_median_ms is None:
            return "no cell finished"
        c = sweep.cells[best]
        if len(sweep.tied()) > 1:
            return f"best: {best_text(sweep)}"
        return f"fastest: {cell_text(c)}, {c.unprofiled_median_ms:.2f} ms"

    # ---- a sweep from disk ------------------------------------------------------------------
    def open_sweep(self, folder: str | Path, quiet: bool = False) -> bool:
        """Show the sweep written in `folder`; False (and why, in the status line) if it is none."""
        try:
            sweep = load_sweep(Path(folder))
        except SweepError as exc:
            if not quiet:
                self.status.setText(str(exc))
            return False
        self.folder = Path(folder)
        self._show(sweep, folder)
        if not quiet:
            model = sweep.model_label
            self.status.setText(f"{model + ': ' if model else ''}{self._best_text()} · from disk: {folder}")
        return True

    def shutdown(self) -> None:
        self.controller.shutdown()
