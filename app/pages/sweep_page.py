"""The Sweep page: `app/sweep_panel.py` (a thread sweep of the model the run controls describe, its
heatmap) in the window: a cell clicked shows its run (listed, and what the Run page shows) while
the heatmap stays in front, so a second click compares the two on the Compare page; a cell
double-clicked opens the Run page; sweep folders opened in the window show here. How long a sweep
will take is guessed from the latest listed run of its model (`earlier_run`)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QWidget

from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.page import OwnContentPage, PageHost
from branchscope.app.pages.run_page import RunPage
from branchscope.app.run_entry import RunSpec
from branchscope.app.sweep_panel import SweepPanel
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import RunRecord
from branchscope.profiling.trace.sources import is_sweep_folder, read_sweep


def earlier_run(host: PageHost, spec: RunSpec) -> RunRecord | None:
    """The run.json of the latest listed run of `spec`'s model that says how long its phases took
    (on this machine: a sweep's runs take about as long); None when none is listed."""
    runs = [e for e in host.run_list if e.run is not None and e.run.phase_seconds and e.model_key == spec.model_key]
    return max(runs, key=lambda e: e.when).run if runs else None


class SweepPage(OwnContentPage, SweepPanel):
    """The Sweep tab: a `SweepPanel` whose cells open in the window (a page of its own content: a
    sweep is its own, whatever run is shown)."""

    def __init__(self, host: PageHost, parent: QWidget | None = None):
        SweepPanel.__init__(self, host.current_spec, host.controller.new_folder, host.cores, parent=parent,
                            earlier_run=lambda spec: earlier_run(host, spec))  # fmt: skip
        self.host = host
        self.runChosen.connect(self._on_cell_chosen)
        self.runActivated.connect(self._on_cell_activated)
        self.compareRequested.connect(self._on_cells_compared)

    # ---- sweep folders and their cells ------------------------------------------------------
    def open_sweeps(self, paths: list[str]) -> tuple[list[str], int]:
        """Show the sweep folders among `paths` here (this page in front); the other paths, and
        how many sweeps opened. A folder that cannot be read says why in a dialog."""
        rest, opened = [], 0
        for path in paths:
            if not is_sweep_folder(Path(path)):
                rest.append(path)
            elif self.open_sweep(path):
                self.host.show_page(self)
                opened += 1
            else:
                self.host.show_error("Cannot open sweep", self.status.text())
        return rest, opened

    def opened_text(self) -> tuple[str, tuple | None]:
        """What the run controls say of the sweep opened from disk shown here, and its model (the
        picker's item, for a demo's sweep)."""
        folder = Path(self.folder or "")
        try:
            sweep = read_sweep(folder)
        except (TraceFormatError, OSError):
            sweep = None
        label = sweep.model_label if sweep is not None else None
        where = f"{folder.parent.name}/{folder.name}" if folder.parent.name else folder.name
        model = ("demo", sweep.demo) if sweep is not None and sweep.demo else None
        return f"opened from disk: {where} — a sweep of {label or 'a model it does not name'}", model

    def _entry_of_folder(self, folder: str) -> int:
        """The listed entry of a run folder, listing it if needed (-1 if it cannot be read), with
        its sweep's sequential 1×1 cell listed too: a cell compares only with its own sweep's."""
        runs = self.host.run_list
        target = Path(folder).resolve()
        k = next((k for k, e in enumerate(runs) if e.trace_path.parent.resolve() == target), -1)
        if k < 0:
            k = runs.current if self.host.open_trace_files([folder]) else -1
        if k >= 0:
            runs.list_sweep_baseline(k)
        return k

    def _on_cell_chosen(self, folder: str) -> None:
        """Its run listed and shown, this page kept in front (a second click compares)."""
        k = self._entry_of_folder(folder)
        if k >= 0 and self.host.show_entry(k):
            self.host.show_page(self)
            self.status.setText(
                f"{self.host.run_list[k].title}: shown on the Run tab (double-click the cell to go there); "
                "click another cell to compare the two"
            )

    def _on_cell_activated(self, folder: str) -> None:
        k = self._entry_of_folder(folder)
        if k >= 0 and self.host.show_entry(k):
            self.host.show_page(self.host.page(RunPage))

    def _on_cells_compared(self, first: str, second: str) -> None:
        ks = [self._entry_of_folder(first), self._entry_of_folder(second)]
        if min(ks) >= 0:
            self.host.page(ComparePage).compare_entries(ks)
