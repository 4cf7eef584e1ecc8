"""File → Export trace…: the shown trace written on a thread, the status bar saying where (or why
not); what is written opens with the shown trace's events, a large job's every rank; the filter
chosen in the dialog gives a typed name its ending before the dialog asks about replacing a file,
and a file the dialog did not ask about is never replaced."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QDialog, QFileDialog

import branchscope.app.trace_export as trace_export
from branchscope.profiling.trace.merge import load_traces
from branchscope.profiling.trace.rank_job import job_of
from branchscope.profiling.trace.reader import load_trace
from tests.builders.export_traces import trace_facts, write_kineto_like
from tests.builders.ranks import write_rank_job

JSON_FILTER = "Chrome JSON (*.json)"


def _choose(monkeypatch, typed: Path, offered: list[str] | None = None, name_filter: str | None = None) -> None:
    """The save dialog, as a user uses it: picks `name_filter` (if any), types `typed`, accepts."""

    def exec_(dialog: QFileDialog) -> int:
        if offered is not None:
            offered.append(Path(dialog.selectedFiles()[0]).name)
        if name_filter is not None:
            dialog.selectNameFilter(name_filter)
            dialog.filterSelected.emit(name_filter)  # as the filter box does when the user picks one
        dialog.selectFile(str(typed))
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(QFileDialog, "exec", exec_)


def _export_action(window):
    return next(a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "&Export trace…")


def _export(window, qtbot) -> str:
    window.menus.exporter.ask()
    qtbot.waitUntil(lambda: not window.menus.exporter.running, timeout=30000)
    return window.statusBar().currentMessage()


def test_export_writes_the_shown_trace_off_the_gui_thread(window, qtbot, tmp_path, monkeypatch):
    source = write_kineto_like(tmp_path / "k.json")
    assert window.open_trace_files([str(source)]) == 1
    out = tmp_path / "out" / "mine"  # no ending typed: the default filter's, Perfetto's
    out.parent.mkdir()
    offered: list[str] = []
    _choose(monkeypatch, out, offered)
    _export_action(window).trigger()
    assert offered == ["k.pftrace"]
    qtbot.waitUntil(lambda: not window.menus.exporter.running, timeout=20000)
    written = out.with_name("mine.pftrace")
    assert window.statusBar().currentMessage().startswith(f"exported to {written}")
    assert written.stat().st_size > 0 and sorted(p.name for p in out.parent.iterdir()) == ["mine.pftrace"]


def test_the_chosen_filter_gives_the_ending_and_a_file_never_asked_about_is_kept(window, qtbot, tmp_path, monkeypatch):
    assert window.open_trace_files([str(write_kineto_like(tmp_path / "k.json"))]) == 1
    precious = tmp_path / "mytrace.pftrace"
    precious.write_text("the user's own file, never asked about")
    _choose(monkeypatch, tmp_path / "mytrace", name_filter=JSON_FILTER)
    assert _export(window, qtbot).startswith(f"exported to {tmp_path / 'mytrace.json'}")
    assert load_trace(tmp_path / "mytrace.json").names == window.shown.trace.names
    assert precious.read_text() == "the user's own file, never asked about"

    # a name with a dot of its own gets no suffix from the dialog: the ending added after it never replaces
    dotted = tmp_path / "my.trace.json"
    dotted.write_text("kept too")
    _choose(monkeypatch, tmp_path / "my.trace", name_filter=JSON_FILTER)
    window.menus.exporter.ask()
    assert not window.menus.exporter.running
    assert window.statusBar().currentMessage().startswith(f"not exported: {dotted} exists")
    assert dotted.read_text() == "kept too"


def test_export_as_json_opens_with_the_same_facts_and_a_job_is_one_file(window, qtbot, tmp_path, monkeypatch):
    job = write_rank_job(tmp_path / "job", ranks=2, steps=2)
    assert window.open_trace_files([str(job)]) == 1
    out = tmp_path / "job.json.gz"
    _choose(monkeypatch, out)
    _export(window, qtbot)
    shown, written = trace_facts(window.shown.trace, with_pid=False), trace_facts(load_trace(out), with_pid=False)
    assert written["events"] == shown["events"] and len(written["events"]) == 16


def test_a_large_job_is_exported_with_every_rank_not_only_those_in_view(window, qtbot, tmp_path, monkeypatch):
    folder = write_rank_job(tmp_path / "job", ranks=12, steps=1)
    assert window.open_trace_files([str(folder)]) == 1
    shown = window.shown.trace
    assert len(job_of(shown).loaded(shown)) < 12  # the window holds a few ranks of it
    _choose(monkeypatch, tmp_path / "all.json")
    assert _export(window, qtbot).startswith(f"exported to {tmp_path / 'all.json'}")
    whole = trace_facts(load_traces(sorted(folder.glob("rank-*.json"))), with_pid=False)
    assert trace_facts(load_trace(tmp_path / "all.json"), with_pid=False)["events"] == whole["events"]


def test_export_with_nothing_shown_or_a_failure_says_so_in_the_status_bar(window, qtbot, tmp_path, monkeypatch):
    _choose(monkeypatch, tmp_path / "x.pftrace")
    window.menus.exporter.ask()
    assert window.statusBar().currentMessage() == "nothing to export: open a trace or a run first"
    assert window.open_trace_files([str(write_kineto_like(tmp_path / "k.json"))]) == 1
    _choose(monkeypatch, tmp_path / "missing" / "x.pftrace")
    message = _export(window, qtbot)
    assert message.startswith("export failed: ") and "does not exist" in message


def test_an_unexpected_failure_is_said_and_the_next_export_may_start(window, qtbot, tmp_path, monkeypatch):
    assert window.open_trace_files([str(write_kineto_like(tmp_path / "k.json"))]) == 1
    _choose(monkeypatch, tmp_path / "x.pftrace")

    def out_of_memory(*_args, **_kwargs):
        raise MemoryError()

    monkeypatch.setattr(trace_export, "export_trace", out_of_memory)
    assert _export(window, qtbot) == "export failed: MemoryError"
    monkeypatch.undo()
    _choose(monkeypatch, tmp_path / "x.pftrace")
    assert _export(window, qtbot).startswith(f"exported to {tmp_path / 'x.pftrace'}")
