"""Traces and folders as branchscope's runs leave them: the small synthetic trace of a run
(fixtures/gui/small_trace.py), run folders with their run.json (the one writer of run.json for the
tests: `records.RunRecord`), sweep folders."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tests.paths import FIXTURES


def write_small_trace(path: Path, mode: str = "fork", gil: bool = True) -> Path:
    """Writes fixtures/gui/small_trace.py's trace of a run in `mode` to `path` (gzipped for .gz;
    `gil`: whether a threads-mode run had the GIL on)."""
    spec = importlib.util.spec_from_file_location("small_trace", FIXTURES / "gui" / "small_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write(path, mode, gil=gil)


def write_run_json(folder: Path, **fields: Any) -> Path:
    """FOLDER/run.json as branchscope writes it (`records.RunRecord`, complete unless told), the one
    writer of run folders' run.json for the tests; returns the folder."""
    from branchscope.profiling.trace.records import RUN_JSON, RunRecord, encode_record

    folder.mkdir(parents=True, exist_ok=True)
    run = RunRecord.parse({"complete": True, **fields})  # nested records from plain data too
    (folder / RUN_JSON).write_bytes(encode_record(run))
    return folder


def write_run_folder(folder: Path, mode: str, interop: int, intra: int, median: float, **fields: Any) -> Path:
    """A run folder as the runner leaves it (small trace, complete run.json) of the inception demo."""
    folder.mkdir(parents=True)
    write_small_trace(folder / "trace.json.gz", mode)
    return write_run_json(
        folder, mode=mode, interop=interop, intra=intra, model="demo inception", source="demo",
        median_ms=median, steps_ms=[median] * 3, unprofiled_steps_ms=[median] * 3, trace="trace.json.gz",
        branches=[{"name": "left"}, {"name": "right"}], **fields,
    )  # fmt: skip


def write_timed_run(
    folder: Path, mode: str, interop: int, intra: int, steps: list[float], cores: int = 2, **fields: Any
) -> Path:
    """A run folder of the inception demo as the runner leaves it, with these (unprofiled and
    profiled) step times, run on `cores` cores (`fields`: more of run.json, e.g. its "load")."""
    folder.mkdir(parents=True)
    write_small_trace(folder / "trace.json.gz", mode)
    return write_run_json(folder, mode=mode, interop=interop, intra=intra, cores=cores, model="demo inception",
                          source="demo", median_ms=steps[len(steps) // 2], steps_ms=steps, unprofiled_steps_ms=steps,
                          trace="trace.json.gz", **fields)  # fmt: skip


#: The advice on `write_advice_runs`' runs: sequential 1×2 beats fork 2×1 beyond their spreads.
ADVICE_SEQ_WINS = (
    "on 2 cores, sequential 1×2 (41.0 ms) beat fork 2×1 (48.0 ms) by 1.17×: "
    "intra-op threads serve this model better than forking its branches"
)


def write_advice_runs(folder: Path) -> dict[str, Path]:
    """Three run folders of one model the advice pairs: sequential 1×1 (71 ms), sequential 1×2
    (41 ms) and fork 2×1 (48 ms), each over five steps ±2 ms ("seq 1x1", "seq 1x2", "fork 2x1")."""
    return {
        "seq 1x1": write_timed_run(folder / "seq11", "sequential", 1, 1, [69.0, 70.0, 71.0, 72.0, 73.0]),
        "seq 1x2": write_timed_run(folder / "seq12", "sequential", 1, 2, [39.0, 40.0, 41.0, 42.0, 43.0]),
        "fork 2x1": write_timed_run(folder / "fork21", "fork", 2, 1, [46.0, 47.0, 48.0, 49.0, 50.0]),
    }


def write_sweep_folder(folder: Path) -> Path:
    """A finished sweep of two cells (sequential 1×1 at 40 ms, fork 2×1 at 20 ms), as `branchscope sweep` leaves it."""
    from branchscope.profiling.trace.records import encode_record
    from branchscope.profiling.trace.sweep_records import SWEEP_JSON, CellRecord, SweepRecord

    a = write_run_folder(folder / "sequential-1x1", "sequential", 1, 1, 40.0)
    b = write_run_folder(folder / "fork-2x1", "fork", 2, 1, 20.0)
    cells = [
        CellRecord(mode="sequential", interop=1, intra=1, run=a.name, status="done",
                   median_ms=40.0, unprofiled_median_ms=40.0, unprofiled_spread_ms=[40.0] * 4),
        CellRecord(mode="fork", interop=2, intra=1, run=b.name, status="done",
                   median_ms=20.0, unprofiled_median_ms=20.0, unprofiled_spread_ms=[20.0] * 4),
    ]  # fmt: skip
    (folder / SWEEP_JSON).write_bytes(encode_record(SweepRecord(demo="inception", cores=2, cells=cells, best=1)))
    return folder


def write_sweep_json(folder: Path, cells: list[dict[str, Any]], **fields: Any) -> Path:
    """FOLDER/sweep.json of these cells (plain dicts: `records.CellRecord`'s fields; `run` defaults to
    MODE-IxJ, `status` to "done") and sweep fields, as `branchscope sweep` writes it; returns the folder."""
    from branchscope.profiling.trace.records import encode_record
    from branchscope.profiling.trace.sweep_records import SWEEP_JSON, SweepRecord

    folder.mkdir(parents=True, exist_ok=True)
    full = [{"run": f"{c['mode']}-{c['interop']}x{c['intra']}", "status": "done", **c} for c in cells]
    sweep = SweepRecord.parse({"cores": 2, **fields, "cells": full})
    (folder / SWEEP_JSON).write_bytes(encode_record(sweep))
    return folder
