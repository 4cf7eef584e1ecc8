"""The sweep engine (branchscope.profiling.run.sweep) without torch: cells run through the real runner
engine with a stand-in worker (python -c, quick), and sweep.json, the sweep folder's rules, the
options and the table checked directly. Real workers: tests/app/test_sweep_cli.py."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

import msgspec
import pytest

from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.outcome import RunResult
from branchscope.profiling.run.processes import CancelFlag
from branchscope.profiling.run.protocol import EXIT_MODE
from branchscope.profiling.run.sweep import (
    SWEEP_JSON,
    SweepCell,
    SweepError,
    SweepRequest,
    add_sweep_arguments,
    cell_record,
    empty_cell,
    load_sweep,
    new_sweep,
    run_sweep,
    sweep_request_from_args,
)
from branchscope.profiling.trace.events import CellEvent, SweepEvent
from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.records import RunRecord, to_builtins
from branchscope.profiling.trace.sweep_records import SweepRecord
from branchscope.profiling.trace.sweep_text import best_text, markdown_table
from tests.builders.runs import write_sweep_json

#: Stands in for the worker: argv = OUT MODE INTEROP INTRA. A step takes 10 / interop + intra ms, so
#: the most inter-op threads win; mode streams fails as the real worker does without CUDA.
FAKE_WORKER = """
import json, sys
from pathlib import Path
out, mode, interop, intra = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "streams":
    print(json.dumps({"event": "error", "exit_code": 3, "message": "multi-stream needs CUDA"}), flush=True)
    sys.exit(3)
print(json.dumps({"event": "progress", "step": 1, "of": 1}), flush=True)
ms = 10.0 / interop + intra
(out / "trace.json").write_text(json.dumps({"traceEvents": []}))
run = {"complete": True, "mode": mode, "interop": interop, "intra": intra,
       "trace_clock": {"base_time_ns": 0, "first_us": 0.0, "last_us": 1.0},
       "steps_ms": [2 * ms, 2 * ms], "median_ms": 2 * ms,
       "unprofiled_steps_ms": [ms - 1, ms, ms + 2, ms + 5], "unprofiled_median_ms": ms + 1}
(out / "run.json").write_text(json.dumps(run))
"""


@pytest.fixture
def fake_worker(monkeypatch):
    def command(req, out):
        return [sys.executable, "-c", FAKE_WORKER, str(out), req.mode, str(req.interop), str(req.intra)]

    monkeypatch.setattr("branchscope.profiling.run.supervise.worker_command", command)


def request(out: Path, modes=("sequential", "fork"), interop=(1, 2), intra=(1,), passes=1, **kw) -> SweepRequest:
    options = RunOptions(demo="twin-mm", steps=1, warmup=0)
    return SweepRequest(out=out, modes=tuple(modes), interop=tuple(interop), intra=tuple(intra), options=options,
                        passes=passes, **kw)  # fmt: skip


def test_sweep_runs_every_cell_into_its_folder_and_writes_sweep_json(tmp_path, fake_worker):
    events = []
    out = tmp_path / "sweep"
    result = run_sweep(request(out, intra=(1, 2)), events.append)
    assert result.ok, result.message
    data = json.loads((out / SWEEP_JSON).read_text())
    assert result.sweep is not None and data == to_builtins(result.sweep)
    # sequential starts no inter-op pool: once per intra-op count, as 1×J
    assert [(c["mode"], c["interop"], c["intra"]) for c in data["cells"]] == [
        ("sequential", 1, 1), ("sequential", 1, 2),
        ("fork", 1, 1), ("fork", 1, 2), ("fork", 2, 1), ("fork", 2, 2),
    ]  # fmt: skip
    assert [c["any_interop"] for c in data["cells"]] == [True, True, False, False, False, False]
    assert data["passes"] == 1
    assert data["complete"] is True and data["cancelled"] is None and data["cores"] == usable_cores()
    for c in data["cells"]:
        ms = 10.0 / c["interop"] + c["intra"]
        assert c["status"] == "done" and c["error"] is None
        assert c["run"] == f"{c['mode']}-{c['interop']}x{c['intra']}"
        assert c["unprofiled_median_ms"] == ms + 1  # run.json's own median, not recomputed
        assert c["median_ms"] == 2 * ms
        # run.json has no spread yet: computed from its unprofiled steps (inclusive quartiles)
        assert c["unprofiled_spread_ms"] == [ms - 1, ms - 0.25, ms + 2.75, ms + 5]
        assert c["oversubscribed"] is (traits_of(c["mode"]).threads(c["interop"], c["intra"]) > usable_cores())
        assert json.loads((out / c["run"] / "run.json").read_text())["interop"] == c["interop"]
        assert c["pass_medians_ms"] == [ms + 1] and c["failed_passes"] == 0
    assert data["best"] == 4  # fork 2×1: 6 ms
    # fork 2×2 (7 ms, steps 6–12, quartiles 6.75–9.75) overlaps fork 2×1's (5.75–8.75); sequential 1×1's (10.75–13.75) does not
    assert data["ties"] == [4, 5]
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "SweepEvent" and kinds.count("CellEvent") == 6 and kinds.count("ProgressEvent") == 6
    cells = [e for e in events if isinstance(e, CellEvent)]
    assert [e.index for e in cells] == list(range(6)) and {e.of for e in cells} == {6}
    assert cells[3].folder == str(out / "fork-1x2") and cells[3].cell.status == "done"
    assert [e.best for e in cells] == [0, 0, 0, 0, 4, 4]
    assert {(e.sweep_pass, e.passes) for e in cells} == {(1, 1)} and cells[-1].ties == [4, 5]
    assert sorted(p.name for p in out.iterdir()) == sorted([SWEEP_JSON, *(c["run"] for c in data["cells"])])


def test_a_failed_cell_is_recorded_and_the_sweep_goes_on(tmp_path, fake_worker):
    result = run_sweep(request(tmp_path, modes=("streams", "fork")))
    assert result.ok
    assert result.sweep is not None
    cells = result.sweep.cells
    assert [c.status for c in cells] == ["failed", "done", "done"]  # streams has no inter-op pool: one cell
    assert cells[0].error == "multi-stream needs CUDA" and cells[0].exit_code == EXIT_MODE
    assert cells[0].unprofiled_median_ms is None and cells[0].unprofiled_spread_ms is None
    assert result.sweep.best == 2
    assert not (tmp_path / "streams-1x1").exists()  # a failed run leaves no folder behind


def test_a_sweep_where_every_cell_fails_exits_with_the_cells_code(tmp_path, fake_worker):
    result = run_sweep(request(tmp_path, modes=("streams",)))
    assert result.exit_code == EXIT_MODE and result.message == "no cell ran: multi-stream needs CUDA"
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    assert data["best"] is None and data["ties"] == [] and [c["status"] for c in data["cells"]] == ["failed"]


def test_cancel_keeps_the_finished_cells_and_marks_the_others_not_run(tmp_path, fake_worker):
    cancel = CancelFlag()

    def on_event(event):
        if isinstance(event, CellEvent) and event.index == 1:
            cancel.set(signal.SIGINT)

    result = run_sweep(request(tmp_path), on_event, cancel)
    assert result.exit_code == 128 + signal.SIGINT and result.cancelled_by == signal.SIGINT
    assert result.message == "cancelled by SIGINT; 2 of 3 cells ran, the rest are marked not run"
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    assert [c["status"] for c in data["cells"]] == ["done", "done", "not run"]
    assert data["cancelled"] == "SIGINT" and data["complete"] is False and data["best"] == 0
    assert not (tmp_path / "fork-2x1").exists()


def test_a_folder_with_foreign_files_is_refused_and_left_alone(tmp_path, fake_worker):
    (tmp_path / "notes.txt").write_text("mine")
    result = run_sweep(request(tmp_path))
    assert result.exit_code == 2
    assert result.message == (
        f"--out {tmp_path} holds files branchscope did not write (notes.txt); choose a new or empty folder, "
        "or pass --overwrite to write beside them"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    result = run_sweep(request(tmp_path, overwrite=True))
    assert result.ok and (tmp_path / "notes.txt").read_text() == "mine"


def test_a_foreign_sweep_json_or_a_folder_named_like_a_cell_is_not_ours(tmp_path, fake_worker):
    (tmp_path / SWEEP_JSON).write_text(json.dumps({"cells": []}))
    assert run_sweep(request(tmp_path)).exit_code == 2
    (tmp_path / SWEEP_JSON).unlink()
    (tmp_path / "fork-1x1").mkdir()
    result = run_sweep(request(tmp_path))
    assert result.exit_code == 2 and "(fork-1x1)" in (result.message or "")


def test_a_second_sweep_replaces_the_first_and_drops_its_cells_only(tmp_path, fake_worker):
    assert run_sweep(request(tmp_path, modes=("sequential", "fork"))).ok
    (tmp_path / "fork-2x1" / "mine.txt").write_text("a user's file in a cell folder")
    result = run_sweep(request(tmp_path, modes=("sequential",)))
    assert result.ok
    # fork-1x1: only branchscope's files, removed with its folder; fork-2x1 keeps the user's file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork-2x1", "sequential-1x1", SWEEP_JSON]
    assert [p.name for p in (tmp_path / "fork-2x1").iterdir()] == ["mine.txt"]
    # fork-2x1 is not this sweep's: the next sweep on the folder refuses it
    assert "(fork-2x1)" in (run_sweep(request(tmp_path, modes=("sequential",))).message or "")


def test_a_folder_being_swept_is_locked(tmp_path, fake_worker):
    inner: list[RunResult | object] = []

    def on_event(event):
        if isinstance(event, SweepEvent):
            inner.append(run_sweep(request(tmp_path)))

    assert run_sweep(request(tmp_path), on_event).ok
    assert inner[0].exit_code == 2
    assert inner[0].message == f"another branchscope sweep is writing to {tmp_path}; wait for it or choose another --out"


def test_a_missing_model_fails_the_sweep_at_once(tmp_path, fake_worker):
    req = SweepRequest(out=tmp_path / "s", modes=("fork",), interop=(1,), intra=(1,), options=RunOptions(model=tmp_path / "nope.py"))
    result = run_sweep(req)
    assert result.exit_code == 2 and "nope.py" in (result.message or "")
    assert not (tmp_path / "s").exists()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_sweep_arguments(p)
    return p.parse_args(argv)


def test_options_round_trip_through_argv(tmp_path):
    req = SweepRequest(out=tmp_path, modes=("fork", "sequential"), interop=(4, 1), intra=(2,), overwrite=True, options=RunOptions(model=tmp_path / "m.pt", steps=3, warmup=0, timeout=12.5, input_shapes=("1x3",), dtype="float16", device="cpu"))  # fmt: skip
    assert sweep_request_from_args(parse(req.argv())) == req
    args = parse(["--demo", "x", "--modes", "fork,fork, sequential", "--interop", "2,1,2", "--intra", "1", "--out", "d"])
    assert args.modes == ("fork", "sequential") and args.interop == (2, 1)


@pytest.mark.parametrize(
    "option", [["--modes", "fork,warp"], ["--interop", "0"], ["--intra", "two"], ["--timeout", "0"]]
)
def test_bad_options_exit_2(option, capsys):
    argv = ["--demo", "x", "--modes", "fork", "--interop", "1", "--intra", "1", "--out", "d"]
    i = argv.index(option[0]) if option[0] in argv else len(argv)
    argv[i : i + 2] = option
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2 and option[0] in capsys.readouterr().err


def test_cell_record_prefers_run_json_spread_and_best_skips_failures(tmp_path):
    cell = SweepCell("fork", 2, 2)
    run = RunRecord.parse({"median_ms": 5.0, "unprofiled_median_ms": 4.0, "unprofiled_steps_ms": [1, 2, 3],
                           "unprofiled_spread_ms": [3, 3.5, 4.5, 6]})  # fmt: skip
    record = cell_record(cell, RunResult(0, tmp_path, run=run), cores=3)
    assert record.unprofiled_spread_ms == (3, 3.5, 4.5, 6) and record.oversubscribed is True
    failed = cell_record(cell, RunResult(4, tmp_path, message="the worker died"), cores=4)
    assert failed.status == "failed" and failed.oversubscribed is False and failed.median_ms is None
    faster = msgspec.structs.replace(record, unprofiled_median_ms=3.5)
    assert SweepRecord(cells=[failed, record, faster]).best_index() == 2
    assert SweepRecord(cells=[failed]).best_index() is None


def test_load_sweep_checks_the_file(tmp_path):
    with pytest.raises(SweepError, match="cannot read"):
        load_sweep(tmp_path)
    (tmp_path / SWEEP_JSON).write_text("{")
    with pytest.raises(SweepError, match="is not JSON"):
        load_sweep(tmp_path)
    (tmp_path / SWEEP_JSON).write_text(json.dumps({"sweep": 1, "cells": [{"mode": "fork", "interop": 1, "intra": 1, "run": "../x"}]}))
    with pytest.raises(SweepError, match="cell 0 needs"):
        load_sweep(tmp_path)
    cells = [
        {"mode": "fork", "interop": 1, "intra": 1, "run": "fork-1x1", "status": "done", "unprofiled_median_ms": "fast"},
        {"mode": "fork", "interop": 2, "intra": 1, "run": "fork-2x1", "status": "done", "unprofiled_median_ms": 3.0,
         "unprofiled_spread_ms": [1, 2, 3]},
        {"mode": "fork", "interop": 4, "intra": 1, "run": "fork-4x1", "status": "weird", "unprofiled_median_ms": 1.0},
    ]  # fmt: skip
    (tmp_path / SWEEP_JSON).write_text(json.dumps({"sweep": 1, "best": 2, "cells": cells}))
    data = load_sweep(tmp_path)
    assert data.cells[0].unprofiled_median_ms is None and data.cells[1].unprofiled_spread_ms is None
    assert data.cells[2].status == "not run" and data.best == 1


def test_markdown_table_names_every_cell(tmp_path, fake_worker):
    result = run_sweep(request(tmp_path, modes=("streams", "fork"), interop=(1,)))
    assert result.sweep is not None
    table = markdown_table(result.sweep).splitlines()
    assert len(table) == 4 and table[0].startswith("| cell | unprofiled median ms |")
    assert table[2] == "| streams 1×1 | - | - | - | - | - | no inter-op pool: any inter-op count; failed: multi-stream needs CUDA |"
    steps = result.sweep.cells[1].unprofiled_steps
    assert steps >= 2  # how many unprofiled steps the median and spread are of
    assert table[3] == f"| fork 1×1 | 12.00 | 10.00, 10.75–13.75, 16.00 | {steps} | 12.00 | 22.00 | best |"


def test_sweeps_take_every_run_option_nproc_included(tmp_path, fake_worker):
    """The sweep's options are the run's (`RunOptions`, declared once): --nproc reaches every cell."""
    p = argparse.ArgumentParser()
    add_sweep_arguments(p)
    args = p.parse_args(["--demo", "twin-mm", "--modes", "sequential", "--interop", "1", "--intra", "1,2", "--nproc", "2",
                         "--steps", "3", "--timeout", "30", "--out", str(tmp_path / "s")])  # fmt: skip
    req = sweep_request_from_args(args)
    assert req.options == RunOptions(demo="twin-mm", nproc=2, steps=3, timeout=30.0)
    assert sweep_request_from_args(p.parse_args(req.argv())) == req  # argv and parser agree
    assert {req.run_request(c).options.nproc for c in req.cells()} == {2}
    assert "--nproc" in req.run_request(req.cells()[0]).argv() and "--nproc" not in req.run_request(req.cells()[0]).argv(worker=True)
    result = run_sweep(request(tmp_path / "one", intra=(1,), modes=("sequential",)))
    assert result.sweep is not None and result.sweep.nproc == 1
    assert json.loads((tmp_path / "one" / SWEEP_JSON).read_text())["nproc"] == 1


# ---- passes, the same configuration once, ties ----------------------------------------------------


class FakeCells:
    """Stands in for `run_profile`: records the cells in the order they run, and what sweep.json
    held as each started; a run's steps are `steps(label, pass)` (None: it fails)."""

    def __init__(self, monkeypatch, steps):
        self.order: list[str] = []
        self.seen: list[dict] = []
        self.steps = steps
        monkeypatch.setattr("branchscope.profiling.run.sweep.run_profile", self)

    def __call__(self, req, progress, cancel):
        label = f"{req.mode} {req.interop}×{req.intra}"
        k = self.order.count(label) + 1
        self.order.append(label)
        self.seen.append(json.loads((req.out.parent / SWEEP_JSON).read_text()))
        steps = self.steps(label, k)
        if steps is None:
            return RunResult(4, req.out, message=f"{label} died in pass {k}")
        run = RunRecord.parse({"complete": True, "mode": req.mode, "interop": req.interop, "intra": req.intra,
                               "median_ms": 2 * sorted(steps)[len(steps) // 2], "unprofiled_steps_ms": steps,
                               "unprofiled_median_ms": sorted(steps)[len(steps) // 2]})  # fmt: skip
        return RunResult(0, req.out, run=run)


def test_passes_run_round_robin_and_a_cell_is_the_median_of_its_passes(tmp_path, monkeypatch):
    # The machine drifts: every run of pass 2 is 30 ms slower than pass 1's, pass 3's 5 ms.
    drift = {1: 0.0, 2: 30.0, 3: 5.0}
    base = {"sequential 1×1": 40.0, "fork 1×1": 50.0, "fork 2×1": 20.0}
    fake = FakeCells(monkeypatch, lambda label, k: [base[label] + drift[k] + d for d in (-1.0, 0.0, 1.0)])
    events = []
    result = run_sweep(request(tmp_path, passes=3), events.append)
    assert result.ok, result.message
    abc = ["sequential 1×1", "fork 1×1", "fork 2×1"]
    assert fake.order == abc * 3  # ABC ABC ABC, never AAA BBB
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    assert data["passes"] == 3 and data["complete"] is True
    for cell, label in zip(data["cells"], abc):
        medians = [base[label] + drift[k] for k in (1, 2, 3)]
        assert cell["pass_medians_ms"] == medians
        assert cell["unprofiled_median_ms"] == base[label] + 5.0  # the median of the passes', not the mean
        lo, q1, q3, hi = cell["unprofiled_spread_ms"]  # of the nine steps pooled
        assert (lo, hi, cell["unprofiled_steps"]) == (base[label] - 1, base[label] + 31, 9)
        assert cell["median_ms"] == 2 * (base[label] + 5.0)
    # sweep.json was rewritten after each run: the 5th run (fork 1×1, pass 2) saw pass 1 whole and pass 2's first cell
    fifth = fake.seen[4]["cells"]
    assert [len(c["pass_medians_ms"] or []) for c in fifth] == [2, 1, 1]
    cells = [e for e in events if isinstance(e, CellEvent)]
    assert [(e.sweep_pass, e.index) for e in cells] == [(k, i) for k in (1, 2, 3) for i in range(3)]
    # The drift (30 ms) is wider than what sets the cells apart (20, 10 ms): all within noise of the best.
    assert data["best"] == 2 and data["ties"] == [2, 0, 1]


def test_with_drift_smaller_than_the_cells_differences_one_cell_is_best(tmp_path, monkeypatch):
    base = {"sequential 1×1": 40.0, "fork 1×1": 50.0, "fork 2×1": 20.0}
    FakeCells(monkeypatch, lambda label, k: [base[label] + k + d for d in (-1.0, 0.0, 1.0)])
    result = run_sweep(request(tmp_path, passes=3))
    assert result.sweep is not None and result.sweep.ties == [2] and best_text(result.sweep) == "fork 2×1"


def test_a_cancel_in_a_later_pass_keeps_every_cells_finished_passes(tmp_path, monkeypatch):
    FakeCells(monkeypatch, lambda label, k: [10.0, 11.0, 12.0])
    cancel = CancelFlag()

    def on_event(event):
        if isinstance(event, CellEvent) and (event.sweep_pass, event.index) == (2, 0):
            cancel.set(signal.SIGTERM)

    result = run_sweep(request(tmp_path, passes=3), on_event, cancel)
    assert result.exit_code == 128 + signal.SIGTERM
    assert result.message == "cancelled by SIGTERM in pass 2 of 3; each cell keeps the passes it finished"
    data = json.loads((tmp_path / SWEEP_JSON).read_text())
    assert [c["status"] for c in data["cells"]] == ["done", "done", "done"]
    assert [len(c["pass_medians_ms"]) for c in data["cells"]] == [2, 1, 1]
    assert data["cancelled"] == "SIGTERM" and data["complete"] is False and data["best"] is not None


def test_a_cell_whose_first_pass_failed_is_not_run_again_and_a_later_failure_is_counted(tmp_path, monkeypatch):
    def steps(label, k):
        if label == "fork 1×1" or (label == "fork 2×1" and k == 2):
            return None
        return [10.0, 11.0, 12.0] if label == "fork 2×1" else [30.0, 31.0, 32.0]

    fake = FakeCells(monkeypatch, steps)
    result = run_sweep(request(tmp_path, passes=3))
    assert result.ok, result.message
    assert fake.order == ["sequential 1×1", "fork 1×1", "fork 2×1", "sequential 1×1", "fork 2×1", "sequential 1×1", "fork 2×1"]
    seq, failed, fork = result.sweep.cells
    assert failed.status == "failed" and failed.error == "fork 1×1 died in pass 1" and failed.pass_medians_ms is None
    assert fork.status == "done" and fork.pass_medians_ms == [11.0, 11.0] and fork.failed_passes == 1
    assert fork.error == "fork 2×1 died in pass 2"
    assert "1 pass failed: fork 2×1 died in pass 2" in markdown_table(result.sweep).splitlines()[4]


def test_a_mode_without_an_inter_op_pool_runs_once_per_intra_op_count(tmp_path):
    req = request(tmp_path, modes=("sequential", "fork", "threads", "streams"), interop=(2, 4), intra=(1, 2), passes=2)
    cells = [c.label for c in req.cells()]
    assert cells == [
        "sequential 1×1", "sequential 1×2",
        "fork 2×1", "fork 2×2", "fork 4×1", "fork 4×2",
        "threads 2×1", "threads 2×2", "threads 4×1", "threads 4×2",
        "streams 1×1", "streams 1×2",
    ]  # fmt: skip
    sweep = new_sweep(req, cores=4)
    assert [c.any_interop for c in sweep.cells] == [True] * 2 + [False] * 8 + [True] * 2
    assert sweep.passes == 2 and sweep.interop == [2, 4]
    assert sweep_request_from_args(parse(req.argv())) == req  # --passes round trips
    with pytest.raises(SystemExit):
        parse(["--demo", "x", "--modes", "fork", "--interop", "1", "--intra", "1", "--out", "d", "--passes", "0"])


def cells_of(*rows):
    """(mode, interop, ms, [min, q1, q3, max], pass medians or None) -> cells for write_sweep_json."""
    return [
        {"mode": m, "interop": i, "intra": 1, "unprofiled_median_ms": ms, "unprofiled_spread_ms": spread,
         "pass_medians_ms": passes, "any_interop": m == "sequential"}
        for m, i, ms, spread, passes in rows
    ]  # fmt: skip


def sweep_of(folder, *rows):
    """A sweep.json of these cells (`cells_of`) written into `folder`, and read back."""
    write_sweep_json(folder, cells_of(*rows))
    return load_sweep(folder)


def test_ties_are_every_cell_within_noise_of_the_best(tmp_path):
    # The case: fork 2×1 and sequential 1×1 overlap in their quartiles; fork 1×1 is clear of both.
    sweep = sweep_of(
        tmp_path / "a",
        ("sequential", 1, 47.8, [45.0, 47.0, 49.0, 52.0], [47.0, 47.8, 60.0]),
        ("fork", 1, 80.0, [78.0, 79.0, 81.0, 83.0], [79.0, 80.0, 81.0]),
        ("fork", 2, 46.0, [40.0, 44.0, 52.0, 60.0], [44.0, 46.0, 55.0]),
    )  # fmt: skip
    assert sweep.best == 2 and sweep.ties == [2, 0]
    assert best_text(sweep) == "fork 2×1, sequential 1×1 (within noise of each other)"
    table = markdown_table(sweep).splitlines()
    assert table[2].endswith("| best, within noise of fork 2×1; no inter-op pool: any inter-op count |")
    assert table[4].endswith("| best, within noise of sequential 1×1 |") and "best" not in table[3]
    # Quartiles apart, but the passes' medians overlap (drift between passes): a tie all the same.
    sweep = sweep_of(
        tmp_path / "b",
        ("fork", 2, 10.6, [10.0, 10.2, 11.0, 11.5], [10.5, 10.6, 14.0]),
        ("fork", 4, 13.3, [13.0, 13.1, 13.5, 13.8], [13.2, 13.3, 13.4]),
        ("fork", 1, 13.9, [13.6, 13.7, 14.1, 14.3], [13.8, 13.9, 14.2]),
    )  # fmt: skip
    assert sweep.ties == [0, 1, 2]
    # Apart by both rules: one best, said as before.
    sweep = sweep_of(
        tmp_path / "c",
        ("fork", 2, 10.6, [10.0, 10.2, 11.0, 11.5], [10.5, 10.6, 11.0]),
        ("fork", 4, 13.3, [13.0, 13.1, 13.5, 13.8], [13.2, 13.3, 13.4]),
    )  # fmt: skip
    assert sweep.ties == [0] and best_text(sweep) == "fork 2×1"
    assert markdown_table(sweep).splitlines()[2].endswith("| best |")


def test_an_earlier_sweep_without_passes_or_ties_still_opens(tmp_path):
    """A sweep.json of before passes (version 1, no pass medians, no any_interop, no ties): read, its
    ties computed from its spreads, its sequential cells at several inter-op counts kept as they ran."""
    cells = [
        {"mode": "sequential", "interop": 1, "intra": 1, "run": "sequential-1x1", "status": "done",
         "unprofiled_median_ms": 47.8, "unprofiled_spread_ms": [46.0, 47.0, 49.0, 50.0], "median_ms": 60.0},
        {"mode": "sequential", "interop": 2, "intra": 1, "run": "sequential-2x1", "status": "done",
         "unprofiled_median_ms": 63.8, "unprofiled_spread_ms": [60.0, 62.0, 65.0, 70.0], "median_ms": 80.0},
        {"mode": "fork", "interop": 2, "intra": 1, "run": "fork-2x1", "status": "done",
         "unprofiled_median_ms": 48.5, "unprofiled_spread_ms": [47.0, 48.0, 49.5, 52.0], "median_ms": 61.0},
    ]  # fmt: skip
    (tmp_path / SWEEP_JSON).write_text(json.dumps({"sweep": 1, "cores": 2, "best": 0, "cells": cells}))
    sweep = load_sweep(tmp_path)
    assert sweep.passes is None and [c.pass_medians_ms for c in sweep.cells] == [None] * 3
    assert [c.any_interop for c in sweep.cells] == [False] * 3
    assert sweep.best == 0 and sweep.ties == [0, 2]
    assert best_text(sweep) == "sequential 1×1, fork 2×1 (within noise of each other)"
    assert len(markdown_table(sweep).splitlines()) == 5


def test_the_report_and_the_advice_name_every_tied_cell(tmp_path):
    from branchscope.app.cmd_sweep import report
    from branchscope.profiling.trace.advice import advice_line, from_sweep

    # sequential 1×2 and fork 2×1: quartiles apart, but the passes drifted across each other.
    write_sweep_json(tmp_path, cells_of(
        ("sequential", 1, 60.0, [58.0, 59.0, 61.0, 62.0], [59.0, 60.0, 61.0]),
        ("fork", 2, 41.0, [40.0, 40.5, 41.5, 48.0], [40.8, 41.0, 47.0]),
    ) + [{"mode": "sequential", "interop": 1, "intra": 2, "unprofiled_median_ms": 44.0,
          "unprofiled_spread_ms": [43.0, 43.5, 44.5, 45.0], "pass_medians_ms": [43.8, 44.0, 44.2], "any_interop": True}],
        passes=3)  # fmt: skip
    sweep = load_sweep(tmp_path)
    assert sweep.ties == [1, 2]
    lines = report(sweep, tmp_path).splitlines()
    assert "best: fork 2×1, sequential 1×2 (within noise of each other)" in lines
    advice = advice_line(from_sweep(sweep))
    assert advice is not None and "are within noise (1.07×, the ranges of their passes' medians overlap)" in advice
    # One pass each: their quartiles alone, and fork 2×1 wins.
    for c in sweep.cells:
        c.pass_medians_ms = None
    assert sweep.tie_indices() == [1]
    assert "beat sequential 1×2" in (advice_line(from_sweep(sweep)) or "")


def test_a_cell_is_oversubscribed_by_the_threads_its_mode_computes_with():
    """Sequential 2×2 on 2 cores computes with 2 intra-op threads (its inter-op pool idle): not
    oversubscribed; fork 2×2 computes with 4 (issue 35, finding 5: both were, by I×J)."""
    assert empty_cell(SweepCell("sequential", 2, 2), cores=2).oversubscribed is False
    assert empty_cell(SweepCell("sequential", 1, 3), cores=2).oversubscribed is True
    assert empty_cell(SweepCell("fork", 2, 2), cores=2).oversubscribed is True
