"""A run's life in the window, from "Run" to its trace listed and shown: started (`start`: the run
controls and status bar say so), finished (its trace read off the GUI thread by the window's one
loader, `app/trace_loader.py`, then listed and shown), and what follows a run:

- the window's first run (`start_first_run`), sequential 1×1 of a model with branches, is followed
  once by the same model forked 2×1 (`LESSON_FOLLOW_UP`); the two are then selected together, so
  one click compares them (`lesson_pair`). Where the worker's Python cannot run fork (TorchScript
  off: the run controls' `mode_problems`, from its probe), the lesson runs the mode fork offers
  instead (`Mode.instead`: threads 2×1), and the status bar says so and why;
- a run of a model whose baseline (sequential 1×1) is not listed is followed by that baseline,
  while the window's `auto_baseline` is on (the speedups need it).

The run controls follow what is shown (`say_shown`): the entry shown, or the sweep opened while the
Sweep page is in front; after a failed run, what still is, and what failed, the controls left as
the user set them (the model chosen stays chosen: the next Run runs it). A mode that cannot run
the model here (the runner's exit 3: no branches, no CUDA) is an expected outcome: a plain note
saying why and which modes can (`cannot_run_text`), no traceback.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QItemSelectionModel, QObject, Signal
from PySide6.QtWidgets import QMessageBox

from branchscope.app.pages.sweep_page import SweepPage
from branchscope.app.run_controller import FinishedRun, RunSpec
from branchscope.app.run_entry import Entry
from branchscope.app.trace_loader import read_run
from branchscope.profiling.run.modes import MODES, mode_named
from branchscope.profiling.run.protocol import EXIT_MODE
from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.model import Trace

#: What follows the window's first run, sequential 1×1 (`RunLifecycle.start_first_run`): the lesson.
LESSON_FOLLOW_UP = ("fork", 2, 1)


class RunLifecycle(QObject):
    """The runs of `window` from start to shown (see the module docstring)."""

    #: A finished run's trace was read, and its entry listed and shown or a dialog said why not (its FinishedRun).
    opened = Signal(object)

    def __init__(self, window: Any):  # the window (app/main_window.py), which imports this module
        super().__init__(window)
        self.window = window
        #: The window's first run (`start_first_run`) while it goes.
        self._first_run: RunSpec | None = None
        #: The lesson's pair, sequential then forked, once both ran (selected together for Compare).
        self.lesson_pair: tuple[Entry, Entry] | None = None
        #: The first run's entry while its follow-up runs.
        self._lesson_first: Entry | None = None
        #: The mode the lesson's follow-up runs (`LESSON_FOLLOW_UP`'s, or the one offered instead).
        self._lesson_mode: str | None = None
        #: The run going on (its spec), to name it when it fails.
        self._running: RunSpec | None = None
        #: The sweep folder last opened from disk (the Sweep page shows it until a sweep runs here).
        self.opened_sweep: str | None = None
        c = window.controller
        c.started.connect(self._on_started)
        c.phase.connect(window.controls.show_phase)
        c.progress.connect(window.controls.show_progress)
        c.finished.connect(self._on_finished)
        c.failed.connect(self._on_failed)
        c.canceled.connect(self._on_canceled)

    # ---- starting ---------------------------------------------------------------------------
    def start(self, spec: RunSpec) -> bool:
        """Start a run of `spec`; False (and a dialog) if it cannot start."""
        w = self.window
        try:
            # The runs folder first: if it cannot be made, the run going on is left alone.
            w.controller.runs_dir()
            w.controller.start(spec)
        except OSError as exc:
            w.controls.show_idle("failed")
            w.statusBar().showMessage(f"run not started: {exc}")
            w.show_error("Cannot start the run", str(exc))
            return False
        return True

    def start_first_run(self, spec: RunSpec) -> bool:
        """The window's first run (see the module docstring): followed by `LESSON_FOLLOW_UP` when
        it is sequential 1×1 and succeeds on a model with branches."""
        self._first_run = spec if traits_of(spec.mode).baseline and (spec.interop, spec.intra) == (1, 1) else None
        return self.start(spec)

    def _on_started(self, spec: RunSpec) -> None:
        self._running = spec
        self.window.controls.show_started(spec)
        self.window.statusBar().showMessage(
            f"running {spec.model_label} {spec.mode} with inter-op {spec.interop} × intra-op {spec.intra}…"
        )

    # ---- finished: read, listed, shown, followed ----------------------------------------------
    def _on_finished(self, result: FinishedRun) -> None:
        self.window.controls.show_idle("done")
        self.window.loader.start(
            list(result.paths), load=read_run, done=lambda trace: self._on_read(result, trace),
            failed=lambda message: self._unreadable(result, message),
            cancelled=lambda: self._not_read(result), keep=True,
        )  # fmt: skip

    def _not_read(self, result: FinishedRun) -> None:
        """The user cancelled reading the run's trace: it is not listed, and the status bar says
        where it stays (File > Open reads it later); nothing follows it."""
        self.window.statusBar().showMessage(f"reading the run's trace was cancelled: it stays in {result.out}")
        self._first_run = None
        self.opened.emit(result)

    def _unreadable(self, result: FinishedRun, message: str) -> None:
        self.window.show_error("The run's trace cannot be read", message)
        self.opened.emit(result)

    def _on_read(self, result: FinishedRun, trace: Trace) -> None:
        spec, w = result.spec, self.window
        entry = Entry(
            spec.model_label, result.trace_path, spec=spec, run=result.run, trace=trace, more_paths=tuple(result.paths[1:])
        )
        if w.add_entry(entry):
            median = result.run.unprofiled_median_ms
            w.statusBar().showMessage(
                f"{spec.model_label} {spec.mode} {spec.interop}×{spec.intra}: "
                + (f"median step {median:.2f} ms (unprofiled)" if isinstance(median, (int, float)) else "done")
                + f" — {result.out}"
            )
            self._select_lesson_pair(result)
            self._follow(result)
        self.opened.emit(result)

    def _follow(self, result: FinishedRun) -> None:
        """Start what follows `result`: the lesson's forked run, else the model's missing baseline."""
        w, spec = self.window, result.spec
        if w.controller.is_running():
            self._first_run = None
            return
        follow_up = self._lesson_follow_up(result)
        if follow_up is not None:
            self._lesson_first, self._lesson_mode = w.run_list.current_entry, follow_up.mode
            w.statusBar().showMessage(
                f"running {spec.model_label} {follow_up.mode} {follow_up.interop}×{follow_up.intra} too: "
                f"the same model {mode_named(follow_up.mode).traits.way or 'in parallel'}, to compare with this run{self._lesson_note(follow_up.mode)}"
            )
            self.start(follow_up)
            return
        baseline = w.run_list.missing_baseline(w.run_list.current) if w.auto_baseline else None
        if baseline is not None:
            # Speedups need the model's sequential 1×1 run: run it too, once.
            w.statusBar().showMessage(f"running {spec.model_label} sequential 1×1 too: the baseline of its speedups")
            self.start(baseline)

    def _lesson_follow_up(self, result: FinishedRun) -> RunSpec | None:
        """The forked run that follows the first run, or None (not the first run, no branches)."""
        first, self._first_run = self._first_run, None
        entry = self.window.run_list.current_entry
        if first is None or result.spec != first or entry is None or entry.branch_count < 2:
            return None
        mode, interop, intra = LESSON_FOLLOW_UP
        return RunSpec(self._lesson_mode_here(mode), interop, intra, first.options)

    def _lesson_mode_here(self, mode: str) -> str:
        """`mode`, or the mode it offers instead where the worker's Python cannot run it (and can that one)."""
        controls = self.window.controls
        instead = mode_named(mode).instead
        if controls.mode_reason(mode) and instead is not None and not controls.mode_reason(instead):
            return instead
        return mode

    def _lesson_note(self, mode: str) -> str:
        """"" for the lesson's own mode; else why it runs `mode` instead: "(fork cannot run here: …)"."""
        planned = LESSON_FOLLOW_UP[0]
        if mode == planned:
            return ""
        return f" ({mode_named(planned).traits.title} cannot run here: {self.window.controls.mode_reason(planned)})"

    def _select_lesson_pair(self, result: FinishedRun) -> None:
        """The follow-up of the first run finished: select it with the first (one click on "Compare
        selected runs" puts them side by side) and say so."""
        first, w = self._lesson_first, self.window
        if first is None or result.spec.mode != self._lesson_mode:
            return
        self._lesson_first = self._lesson_mode = None
        second = w.run_list.current_entry
        k = w.run_list.index_of(first)
        if second is None or k < 0:
            return
        self.lesson_pair = (first, second)
        with w.runs.quietly():
            flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
            w.runs.selectionModel().select(w.runs.model().index(k, 0), flags)
        w.statusBar().showMessage(
            f"{first.title} and {second.title}: both selected — Compare selected runs shows them side by side"
        )

    # ---- failed, cancelled --------------------------------------------------------------------
    def _on_failed(self, message: str, details: str) -> None:
        self._first_run = self._lesson_first = None
        w = self.window
        w.controls.show_idle("failed")
        w.statusBar().showMessage(f"run failed: {message}")
        # The views still show what they showed: the controls go back to it, and say what failed.
        failed = self._running
        what = f"{failed.model_label} {failed.mode} {failed.interop}×{failed.intra}" if failed is not None else ""
        # The controls stay as the user set them: what failed is what the next Run tries again.
        self.say_shown(f" (the run of {what} failed)" if what else " (the run failed)")
        if w.controller.last_exit_code == EXIT_MODE and failed is not None:
            box = w.show_error(f"{mode_named(failed.mode).traits.title} cannot run {failed.model_label}",
                               cannot_run_text(message, failed.mode))  # fmt: skip
            box.setIcon(QMessageBox.Icon.Information)
        else:
            w.show_error("The run failed", message, details)

    def _on_canceled(self, spec: RunSpec) -> None:
        if self._first_run is not None and spec == self._first_run:
            self._first_run = None
        self._lesson_first = None  # a follow-up cancelled: no pair to select
        w = self.window
        if not w.controller.is_running():
            w.controls.show_idle("cancelled")
            w.statusBar().showMessage(f"cancelled {spec.model_label} {spec.mode}")

    # ---- the run controls follow what is shown ----------------------------------------------
    def say_shown(self, note: str = "", *, settings: bool = False) -> None:
        """The run controls say what is shown (and, with `settings`, are set to its configuration,
        asking for no run): the entry shown, or the sweep opened while the Sweep page is in front."""
        w = self.window
        sweeps = w.page(SweepPage)
        in_front = w.tabs.currentWidget() is sweeps
        if in_front and sweeps.folder is not None and str(sweeps.folder) == self.opened_sweep and not note:
            text, model = sweeps.opened_text()
            w.controls.follow(text, from_disk=True, model=model, apply=settings)
            return
        e = w.run_list.current_entry
        if e is None:
            failed = note.strip(" ()")
            w.controls.follow(f"nothing shown yet: {failed}" if failed else "")
            return
        k = w.run_list.index_of(e)
        w.controls.follow(
            e.shown_text(k + 1) + note, from_disk=e.from_disk or e.spec is None, model=e.picker_item,
            mode=e.mode, threads=e.threads, steps=e.steps, nproc=e.nproc, apply=settings,
        )  # fmt: skip


def cannot_run_text(message: str, mode: str) -> str:
    """The note of a run whose mode cannot run its model here (`message`, the runner's one line): why,
    then the modes that may (those needing no branches run any model; where `mode` needs TorchScript,
    those that run branches without it)."""
    failed = mode_named(mode)
    others = []
    for other in MODES.values():
        if other is failed or other.needs_cuda:
            continue
        if not other.needs_branches:
            others.append(f"{other.traits.title} runs any model as it is (the Intra-op slider gives it the cores)")
        elif failed.needs_torchscript and not other.needs_torchscript:
            others.append(f"{other.traits.title} runs a model's branches without TorchScript")
    tail = "Choose another mode and press Run: " + "; ".join(others) + "." if others else ""
    return f"{message[:1].upper()}{message[1:]}.\n\n{tail}".rstrip()
