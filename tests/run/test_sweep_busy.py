"""A sweep's cells that ran on a busy machine (sweep.json's "busy": run.json's `load.busy` in any
pass): the table, the best cell's line and the advice say so; a sweep.json of before "busy" takes
it from the cells' run.json."""

from __future__ import annotations

import json

from branchscope.profiling.run.sweep import load_sweep, run_sweep
from branchscope.profiling.trace.records import LoadRecord
from branchscope.profiling.trace.sweep_records import SWEEP_JSON
from branchscope.profiling.trace.sweep_text import best_text, markdown_table, sweep_advice
from tests.builders.runs import write_run_json, write_sweep_json
from tests.run.test_sweep import FakeCells, request
from tests.run.test_sweep_starved import MEDIANS, _steps

#: What run.json's load says of a run on a busy machine (others took 0.84 of 2 cores), not starved.
BUSY = LoadRecord(cores=2, others_cores=0.84, own_cores=0.95, own_wait_cores=0.02, busy=True)
QUIET = LoadRecord(cores=2, others_cores=0.03, own_cores=0.95, own_wait_cores=0.02, busy=False)


class LoadedCells(FakeCells):
    """`FakeCells` whose run of `label` in pass k ran on a busy machine when `busy(label, k)`."""

    def __init__(self, monkeypatch, busy):
        super().__init__(monkeypatch, _steps)
        self.busy = busy

    def __call__(self, req, progress, cancel):
        result = super().__call__(req, progress, cancel)
        label = self.order[-1]
        if result.run is not None:
            result.run.load = BUSY if self.busy(label, self.order.count(label)) else QUIET
            result.run.starved = False
        return result


def _sweep(tmp_path, passes=2):
    return run_sweep(request(tmp_path, modes=("sequential", "threads"), interop=(2,), intra=(1, 2), passes=passes))


def test_a_cell_busy_in_any_pass_is_busy_and_the_advice_says_its_win_came_from_a_busy_machine(tmp_path, monkeypatch):
    # The evidence's sweep: threads 2×1 "beat" sequential 1×2 by 4.50×; sequential 1×2 ran on a busy machine.
    LoadedCells(monkeypatch, lambda label, k: label == "sequential 1×2" and k == 2)
    result = _sweep(tmp_path)
    assert result.ok, result.message
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    labels = [f"{c['mode']} {c['interop']}×{c['intra']}" for c in data["cells"]]
    assert {label: c["busy"] for label, c in zip(labels, data["cells"])} == {
        "sequential 1×1": False, "sequential 1×2": True, "threads 2×1": False, "threads 2×2": False}  # fmt: skip
    advice = data["advice"]
    assert "by 4.50×" in advice["text"]
    assert advice["text"].endswith("(sequential 1×2 ran on a busy machine: re-run it on a quiet one)")
    assert advice["reason"].endswith("; sequential 1×2 ran on a busy machine: re-run it on a quiet one")
    sweep = load_sweep(tmp_path)
    assert sweep_advice(sweep) == sweep.advice  # the CLI and the window say what sweep.json holds
    row = next(line for line in markdown_table(sweep).splitlines() if line.startswith("| sequential 1×2 "))
    assert "busy machine" in row


def test_the_best_cell_on_a_busy_machine_says_so_and_a_quiet_sweep_adds_nothing(tmp_path, monkeypatch):
    LoadedCells(monkeypatch, lambda label, k: label == "threads 2×1")
    assert _sweep(tmp_path, passes=1).ok
    sweep = load_sweep(tmp_path)
    assert best_text(sweep) == "threads 2×1 (busy machine)"
    assert sweep.advice is not None and sweep.advice.text.endswith("(threads 2×1 ran on a busy machine: re-run it on a quiet one)")

    quiet = tmp_path / "quiet"
    LoadedCells(monkeypatch, lambda label, k: False)
    assert _sweep(quiet, passes=1).ok
    sweep = load_sweep(quiet)
    assert best_text(sweep) == "threads 2×1" and "busy" not in (sweep.advice.text if sweep.advice else "busy")


def test_both_cells_of_the_advice_on_a_busy_machine_are_both_named(tmp_path, monkeypatch):
    LoadedCells(monkeypatch, lambda label, k: label in ("threads 2×1", "sequential 1×2"))
    assert _sweep(tmp_path, passes=1).ok
    advice = load_sweep(tmp_path).advice
    assert advice is not None
    assert advice.text.endswith("(sequential 1×2 and threads 2×1 ran on a busy machine: re-run them on a quiet one)")


def test_a_sweep_json_without_busy_reads_it_from_the_cells_run_json(tmp_path):
    cells = [{"mode": m, "interop": i, "intra": j, "unprofiled_median_ms": MEDIANS[f"{m} {i}×{j}"],
              "unprofiled_spread_ms": [MEDIANS[f"{m} {i}×{j}"] + d for d in (-1.0, -0.5, 0.5, 1.0)]}
             for m, i, j in (("sequential", 1, 2), ("threads", 2, 1))]  # fmt: skip
    write_sweep_json(tmp_path, cells, sweep=3)
    raw = json.loads((tmp_path / SWEEP_JSON).read_text())
    for c in raw["cells"]:
        del c["busy"]  # as a sweep.json written before "busy"
    (tmp_path / SWEEP_JSON).write_text(json.dumps(raw))
    write_run_json(tmp_path / "sequential-1x2", mode="sequential", interop=1, intra=2, load={"busy": True})
    write_run_json(tmp_path / "threads-2x1", mode="threads", interop=2, intra=1, load={"busy": False})
    sweep = load_sweep(tmp_path)
    assert [c.busy for c in sweep.cells] == [True, False]
    advice = sweep_advice(sweep)
    assert advice is not None and "beat sequential 1×2 (222.7 ms) by 4.50×" in advice.text
    assert advice.text.endswith("(sequential 1×2 ran on a busy machine: re-run it on a quiet one)")
