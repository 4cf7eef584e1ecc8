"""A sweep whose Python cannot run a mode (fork where TorchScript is off): that mode's cells are
skipped before any run, each with the mode's reason in sweep.json and the table, and the rest run.
The probe is faked (`modes_unavailable`); the cells are `FakeCells`."""

from __future__ import annotations

import json

from branchscope.profiling.run import sweep as sweep_module
from branchscope.profiling.run.protocol import EXIT_MODE
from branchscope.profiling.run.sweep import SWEEP_JSON, modes_skipped, run_sweep
from branchscope.profiling.trace.events import CellEvent, SweepEvent
from branchscope.profiling.trace.sweep_records import MODE_CANNOT_RUN, NOT_RUN, CellRecord
from branchscope.profiling.trace.sweep_text import markdown_table
from tests.run.test_sweep import FakeCells, request

#: What fork's check says where TorchScript is disabled (`fork.check`, as the probe reports it).
NO_TORCHSCRIPT = (
    "fork mode needs TorchScript, and TorchScript is disabled in this torch (torch.jit.script gives back the "
    "Python function: PYTORCH_JIT=0?) (torch 2.13.0+cpu): use threads mode (--mode threads), which runs the "
    "same branches on a pool of Python threads in eager PyTorch"
)


def probe_says(monkeypatch, problems: dict[str, str]) -> list:
    """The sweep's Python's probe answers `problems`; the Pythons asked are recorded."""
    asked: list = []

    def fake(python):
        asked.append(python)
        return dict(problems)

    monkeypatch.setattr(sweep_module, "modes_unavailable", fake)
    return asked


def steady(label, k):
    return [10.0, 11.0, 12.0]


def test_fork_cells_are_skipped_with_the_reason_and_the_rest_run(tmp_path, monkeypatch):
    asked = probe_says(monkeypatch, {"fork": NO_TORCHSCRIPT})
    fake = FakeCells(monkeypatch, steady)
    events = []
    result = run_sweep(request(tmp_path, modes=("sequential", "fork", "threads"), passes=2), events.append)
    assert result.ok, result.message
    assert asked == [None]  # this process's own Python, asked once before any cell
    assert "fork" not in " ".join(fake.order) and fake.order.count("sequential 1×1") == 2
    assert sorted(set(fake.order)) == ["sequential 1×1", "threads 1×1", "threads 2×1"]
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    fork_cells = [c for c in data["cells"] if c["mode"] == "fork"]
    assert len(fork_cells) == 2
    for c in fork_cells:
        assert (c["status"], c["error"], c["exit_code"]) == (NOT_RUN, NO_TORCHSCRIPT, EXIT_MODE)
        assert not (tmp_path / c["run"]).exists()
    assert all(c["status"] == "done" for c in data["cells"] if c["mode"] != "fork")
    # The first event, sweep.json as first written, already says which cells are skipped and why.
    first = events[0]
    assert isinstance(first, SweepEvent) and [c.skipped for c in first.sweep.cells if c.mode == "fork"] == [NO_TORCHSCRIPT] * 2
    assert not any(isinstance(e, CellEvent) and e.cell.mode == "fork" for e in events)
    table = markdown_table(result.sweep)
    assert table.count(f"skipped: {NO_TORCHSCRIPT}") == 2


def test_a_sweep_of_fork_alone_exits_3_with_the_reason(tmp_path, monkeypatch):
    probe_says(monkeypatch, {"fork": NO_TORCHSCRIPT})
    fake = FakeCells(monkeypatch, steady)
    result = run_sweep(request(tmp_path, modes=("fork",)))
    assert (result.exit_code, result.message) == (EXIT_MODE, f"no cell ran: {NO_TORCHSCRIPT}")
    assert fake.order == []
    assert json.loads((tmp_path / SWEEP_JSON).read_text())["complete"] is True


def test_with_torchscript_every_fork_cell_runs(tmp_path, monkeypatch):
    probe_says(monkeypatch, {})
    fake = FakeCells(monkeypatch, steady)
    assert run_sweep(request(tmp_path)).ok
    assert fake.order == ["sequential 1×1", "fork 1×1", "fork 2×1"]


def test_modes_without_a_check_need_no_probe(monkeypatch):
    asked = probe_says(monkeypatch, {"fork": NO_TORCHSCRIPT})
    assert modes_skipped(("sequential", "threads"), None) == {}
    assert asked == []
    assert modes_skipped(("sequential", "fork"), None) == {"fork": NO_TORCHSCRIPT}


def test_only_a_cell_its_mode_could_not_run_reads_as_skipped():
    """A skipped cell is "not run" with exit code 3 and why; a cell of a status this reader does not
    know (read as "not run") keeps its error, and is not taken for skipped."""
    assert MODE_CANNOT_RUN == EXIT_MODE
    why = "fork mode needs TorchScript"
    assert CellRecord(mode="fork", interop=2, intra=1, status=NOT_RUN, error=why, exit_code=EXIT_MODE).skipped == why
    killed = CellRecord(mode="fork", interop=2, intra=1, status=NOT_RUN, error="worker killed by signal 9")
    assert killed.skipped is None
