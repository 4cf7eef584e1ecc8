"""File → Export trace…: the shown trace written on a thread, the status bar saying where (or why
not); what is written opens with the shown trace's events."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from branchscope.profiling.trace.reader import load_trace
from tests.builders.export_traces import trace_facts, write_kineto_like
from tests.builders.ranks import write_rank_job


def _choose(monkeypatch, path: Path, starts: list[str]) -> None:
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda _p, _t, start="", _f="": (starts.append(start), (str(path), ""))[1])  # fmt: skip


def _export_action(window):
    return next(a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "&Export trace…")


def test_export_writes_the_shown_trace_off_the_gui_thread(window, qtbot, tmp_path, monkeypatch):
    source = write_kineto_like(tmp_path / "k.json")
    assert window.open_trace_files([str(source)]) == 1
    out = tmp_path / "out" / "mine"  # no ending typed: Perfetto's
    out.parent.mkdir()
    starts: list[str] = []
    _choose(monkeypatch, out, starts)
    _export_action(window).trigger()
    assert starts == ["k.pftrace"]
    qtbot.waitUntil(lambda: not window.menus.exporter.running, timeout=20000)
    written = out.with_name("mine.pftrace")
    assert window.statusBar().currentMessage().startswith(f"exported to {written}")
    assert written.stat().st_size > 0 and sorted(p.name for p in out.parent.iterdir()) == ["mine.pftrace"]


def test_export_as_json_opens_with_the_same_facts_and_a_job_is_one_file(window, qtbot, tmp_path, monkeypatch):
    job = write_rank_job(tmp_path / "job", ranks=2, steps=2)
    assert window.open_trace_files([str(job)]) == 1
    out = tmp_path / "job.json.gz"
    _choose(monkeypatch, out, [])
    window.menus.exporter.ask()
    qtbot.waitUntil(lambda: not window.menus.exporter.running, timeout=20000)
    shown, written = trace_facts(window.shown.trace, with_pid=False), trace_facts(load_trace(out), with_pid=False)
    assert written["events"] == shown["events"] and len(written["events"]) == 16


def test_export_with_nothing_shown_or_a_failure_says_so_in_the_status_bar(window, qtbot, tmp_path, monkeypatch):
    _choose(monkeypatch, tmp_path / "x.pftrace", [])
    window.menus.exporter.ask()
    assert window.statusBar().currentMessage() == "nothing to export: open a trace or a run first"
    assert window.open_trace_files([str(write_kineto_like(tmp_path / "k.json"))]) == 1
    _choose(monkeypatch, tmp_path / "missing" / "x.pftrace", [])
    window.menus.exporter.ask()
    qtbot.waitUntil(lambda: not window.menus.exporter.running, timeout=20000)
    assert window.statusBar().currentMessage().startswith("export failed: ")
    assert "does not exist" in window.statusBar().currentMessage()
