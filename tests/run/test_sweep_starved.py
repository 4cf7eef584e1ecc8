"""A sweep's starved cells (sweep.json version 3): a cell is "starved" when a pass's run.json says
its run was; the sweep's "advice" object never names a starved cell the winner; sweep.json of
version 2 (no "starved", no "advice") still opens."""

from __future__ import annotations

import json

from branchscope.profiling.run.sweep import load_sweep, run_sweep
from branchscope.profiling.trace.advice import advice_line, from_sweep
from branchscope.profiling.trace.records import to_builtins
from branchscope.profiling.trace.sweep_records import SWEEP_FORMAT, SWEEP_FORMATS, SWEEP_JSON, SweepRecord
from branchscope.profiling.trace.sweep_text import best_text, markdown_table
from tests.run.test_sweep import FakeCells, request


class StarvedCells(FakeCells):
    """`FakeCells` whose run of `label` in pass k says it was starved when `starved(label, k)`."""

    def __init__(self, monkeypatch, steps, starved):
        super().__init__(monkeypatch, steps)
        self.starved = starved

    def __call__(self, req, progress, cancel):
        result = super().__call__(req, progress, cancel)
        label = self.order[-1]
        if result.run is not None:
            result.run.starved = self.starved(label, self.order.count(label))
        return result


MEDIANS = {"sequential 1×1": 300.0, "sequential 1×2": 222.7, "threads 2×1": 49.5, "threads 2×2": 60.0}


def _steps(label, _k):
    ms = MEDIANS[label]
    return [ms - 1.0, ms, ms + 1.0]


def _sweep(tmp_path, passes=1):
    return run_sweep(request(tmp_path, modes=("sequential", "threads"), interop=(2,), intra=(1, 2), passes=passes))


def test_a_cell_starved_in_any_pass_is_starved_and_the_sweeps_advice_names_no_winner(tmp_path, monkeypatch):
    # threads 2×1 got too few cores in its second pass only.
    StarvedCells(monkeypatch, _steps, lambda label, k: label == "threads 2×1" and k == 2)
    result = _sweep(tmp_path, passes=3)
    assert result.ok, result.message
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    assert data["sweep"] == SWEEP_FORMAT == 3
    labels = [f"{c['mode']} {c['interop']}×{c['intra']}" for c in data["cells"]]
    assert {label: c["starved"] for label, c in zip(labels, data["cells"])} == {
        "sequential 1×1": False, "sequential 1×2": False, "threads 2×1": True, "threads 2×2": False}  # fmt: skip
    advice = data["advice"]
    assert advice["winner"] is None and advice["reason"].startswith("starved: threads 2×1 got fewer cores")
    assert "4.50" not in advice["text"]
    assert "branchscope speedup --configs sequential:1x2,threads:2x1" in advice["text"]
    # Read back: the same record, the same advice as the window and `branchscope sweep` compute it.
    sweep = load_sweep(tmp_path)
    assert to_builtins(sweep) == data and advice_line(from_sweep(sweep)) == advice["text"]
    row = next(line for line in markdown_table(sweep).splitlines() if line.startswith("| threads 2×1 "))
    assert "starved of cores" in row
    assert best_text(sweep) == "threads 2×1 (starved of cores)"  # the fastest, but its time is no claim


def test_cells_never_starved_give_the_winner_by_configuration_and_index(tmp_path, monkeypatch):
    StarvedCells(monkeypatch, _steps, lambda label, k: False if label != "sequential 1×1" else None)
    result = _sweep(tmp_path)
    assert result.ok, result.message
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    assert [c["starved"] for c in data["cells"]] == [False] * 4  # run.json's null: not starved
    index = next(i for i, c in enumerate(data["cells"]) if c["mode"] == "threads")
    assert data["advice"]["winner"] == {"mode": "threads", "interop": 2, "intra": 1, "index": index}
    assert "threads 2×1 (49.5 ms) beat sequential 1×2 (222.7 ms) by 4.50×" in data["advice"]["text"]
    assert data["advice"]["reason"].startswith("faster: threads 2×1 by 4.50×, beyond noise")


def test_a_version_2_sweep_json_without_starved_or_advice_still_opens(tmp_path):
    assert SWEEP_FORMATS == (1, 2, 3)
    cells = [
        {"mode": "sequential", "interop": 1, "intra": 2, "run": "sequential-1x2", "status": "done", "any_interop": True,
         "unprofiled_median_ms": 41.0, "unprofiled_spread_ms": [40.0, 40.5, 41.5, 42.0], "pass_medians_ms": [41.0]},
        {"mode": "fork", "interop": 2, "intra": 1, "run": "fork-2x1", "status": "done",
         "unprofiled_median_ms": 48.0, "unprofiled_spread_ms": [47.0, 47.5, 48.5, 49.0], "pass_medians_ms": [48.0]},
    ]  # fmt: skip
    (tmp_path / SWEEP_JSON).write_text(json.dumps({"sweep": 2, "cores": 2, "passes": 1, "ties": [0], "best": 0,
                                                   "complete": True, "cells": cells}))  # fmt: skip
    sweep = load_sweep(tmp_path)
    assert sweep.sweep == 2 and sweep.advice is None and [c.starved for c in sweep.cells] == [False, False]
    assert (advice_line(from_sweep(sweep)) or "").startswith("on 2 cores, sequential 1×2 (41.0 ms) beat fork 2×1")
    assert SweepRecord.parse({"advice": "fork won", "cells": []}).advice is None  # lenient: not an object
