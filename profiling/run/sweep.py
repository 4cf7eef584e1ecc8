"""Thread sweeps: one profiling run per cell (mode × inter-op × intra-op threads), side by side.

`run_sweep(request, on_event, cancel)` runs every cell through the runner engine (`run_profile`: a
fresh worker each, the run folder's promises) into DIR/<mode>-<interop>x<intra>/, and keeps
DIR/sweep.json up to date, rewritten atomically after each cell, so a killed sweep keeps the cells
it finished:

    {"sweep": 1, "demo", "model", "modes", "interop", "intra", "steps", "warmup", "device", "cores",
     "complete": bool, "cancelled": null | "SIGINT", "best": INDEX | null,
     "cells": [{"mode", "interop", "intra", "run": SUBDIR, "status": "done" | "failed" | "not run",
                "oversubscribed": interop × intra > cores, "median_ms", "unprofiled_median_ms",
                "unprofiled_spread_ms": [min, q1, q3, max], "error", "exit_code"}]}

`best` is the finished cell with the lowest unprofiled median. A failed cell keeps its message and
null numbers and the sweep goes on; a cancelled sweep marks the cell it stopped and those after it
"not run".

DIR follows the run folder's rules (branchscope.profiling.run.folder): it is locked while the sweep
runs, and refused when it holds files branchscope did not write (unless --overwrite). What is ours:
an earlier sweep.json of ours and the cell folders it lists, and an earlier run's files. Cell folders
of an earlier sweep that this one does not run lose the files branchscope wrote in them (and go when
that leaves them empty), as a run folder drops an earlier run's files.

No torch and no Qt here.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from branchscope.profiling.files import read_json_object
from branchscope.profiling.run.folder import (
    STAGING_PREFIX,
    RunFolderError,
    describe_os_error,
    files_written_by_branchscope,
    lock_folder,
    real_dir,
    remove_files_written,
    remove_leftover_staging,
)
from branchscope.profiling.run.processes import set_death_signal
from branchscope.profiling.run.protocol import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    MODES,
    PARENT_PID_ENV,
    RunRequest,
    positive_seconds,
)
from branchscope.profiling.run.runner import (
    CancelFlag,
    RunError,
    RunResult,
    run_profile,
    validate,
    write_json_atomic,
)
from branchscope.profiling.trace.step_stats import StepStats

SWEEP_JSON = "sweep.json"
#: sweep.json's format version, also what marks a sweep.json as branchscope's.
SWEEP_VERSION = 1
DONE, FAILED, NOT_RUN = "done", "failed", "not run"


class SweepError(Exception):
    """A sweep.json that cannot be read, or a DIR that cannot take a sweep; one line for `error: …`."""


@dataclass(frozen=True)
class SweepCell:
    mode: str
    interop: int
    intra: int

    @property
    def run(self) -> str:
        """The cell's run folder inside DIR, e.g. fork-2x1."""
        return f"{self.mode}-{self.interop}x{self.intra}"

    @property
    def label(self) -> str:
        return f"{self.mode} {self.interop}×{self.intra}"


@dataclass
class SweepRequest:
    """A sweep: the model (demo or file), the values of each axis, the run options of every cell."""

    out: Path
    modes: tuple[str, ...]
    interop: tuple[int, ...]
    intra: tuple[int, ...]
    demo: str | None = None
    model: Path | None = None
    steps: int = 10
    warmup: int = 3
    #: Per cell.
    timeout: float = 600.0
    input_shapes: tuple[str, ...] = ()
    dtype: str = "float32"
    device: str = "auto"
    overwrite: bool = False

    def cells(self) -> list[SweepCell]:
        """Mode-major, then inter-op, then intra-op, each in the order given."""
        return [SweepCell(m, i, j) for m in self.modes for i in self.interop for j in self.intra]

    def run_request(self, cell: SweepCell) -> RunRequest:
        return RunRequest(
            mode=cell.mode,
            interop=cell.interop,
            intra=cell.intra,
            out=Path(self.out) / cell.run,
            demo=self.demo,
            model=self.model,
            steps=self.steps,
            warmup=self.warmup,
            timeout=self.timeout,
            input_shapes=self.input_shapes,
            dtype=self.dtype,
            device=self.device,
            overwrite=self.overwrite,
        )

    def argv(self) -> list[str]:
        """The options of `branchscope sweep` that `add_sweep_arguments` reads back into this request."""
        args = ["--demo", str(self.demo)] if self.demo else ["--model", str(self.model)]
        args += ["--modes", ",".join(self.modes)]
        args += ["--interop", ",".join(map(str, self.interop)), "--intra", ",".join(map(str, self.intra))]
        args += ["--steps", str(self.steps), "--warmup", str(self.warmup), "--timeout", repr(float(self.timeout))]
        for shape in self.input_shapes:
            args += ["--input-shape", shape]
        args += ["--dtype", self.dtype, "--device", self.device, "--out", str(self.out)]
        if self.overwrite:
            args.append("--overwrite")
        return args


def _comma_list(kind: Callable[[str], Any], what: str) -> Callable[[str], tuple[Any, ...]]:
    def parse(text: str) -> tuple[Any, ...]:
        values: list[Any] = []
        for part in text.split(","):
            try:
                value = kind(part.strip())
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} is not {what}" + (f" ({exc})" if str(exc) else "")) from None
            if value not in values:
                values.append(value)
        return tuple(values)

    return parse


def _mode(text: str) -> str:
    if text not in MODES:
        raise ValueError(f"one of {', '.join(MODES)}")
    return text


def _threads(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("at least 1")
    return value


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `branchscope sweep` (read back by `sweep_request_from_args`)."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--demo", metavar="NAME", help="a built-in demo (see `branchscope demos`)")
    src.add_argument("--model", metavar="PATH", type=Path, help="a .py file (build_model, example_inputs) or a TorchScript archive")
    p.add_argument("--modes", type=_comma_list(_mode, "a mode"), required=True, metavar="M,M",
                   help=f"modes to run, comma-separated ({', '.join(MODES)})")  # fmt: skip
    p.add_argument("--interop", type=_comma_list(_threads, "a thread count"), required=True, metavar="N,N",
                   help="inter-op thread counts, comma-separated")  # fmt: skip
    p.add_argument("--intra", type=_comma_list(_threads, "a thread count"), required=True, metavar="N,N",
                   help="intra-op thread counts, comma-separated")  # fmt: skip
    p.add_argument("--steps", type=int, default=10, metavar="K", help="timed and profiled steps per cell (default 10)")
    p.add_argument("--warmup", type=int, default=3, metavar="W", help="warm-up steps per cell (default 3)")
    p.add_argument("--timeout", type=positive_seconds, default=600.0, metavar="S",
                   help="stop a cell's worker after S seconds (default 600)")  # fmt: skip
    p.add_argument("--input-shape", action="append", default=[], dest="input_shapes", metavar="SHAPE",
                   help="input shape of a TorchScript archive, like 8x64x35x35 (once per input)")  # fmt: skip
    p.add_argument("--dtype", default="float32", help="input dtype of a TorchScript archive (default float32)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="where sweep.json and one run folder per cell go: a new or empty folder, or an earlier sweep's")  # fmt: skip
    p.add_argument("--overwrite", action="store_true",
                   help="write into DIR (and the cells' folders) even though they hold files branchscope did not write")  # fmt: skip


def sweep_request_from_args(args: argparse.Namespace) -> SweepRequest:
    return SweepRequest(
        out=args.out,
        modes=tuple(args.modes),
        interop=tuple(args.interop),
        intra=tuple(args.intra),
        demo=args.demo,
        model=args.model,
        steps=args.steps,
        warmup=args.warmup,
        timeout=args.timeout,
        input_shapes=tuple(args.input_shapes),
        dtype=args.dtype,
        device=args.device,
        overwrite=bool(args.overwrite),
    )


def usable_cores() -> int:
    """The cores this process may run on (its affinity), as the worker counts them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---------------------------------------------------------------- sweep.json


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) else None


def empty_cell(cell: SweepCell, cores: int) -> dict[str, Any]:
    """A cell not run (yet)."""
    return {
        "mode": cell.mode,
        "interop": cell.interop,
        "intra": cell.intra,
        "run": cell.run,
        "status": NOT_RUN,
        "oversubscribed": cell.interop * cell.intra > cores,
        "median_ms": None,
        "unprofiled_median_ms": None,
        "unprofiled_spread_ms": None,
        "unprofiled_steps": None,
        "error": None,
        "exit_code": None,
    }


def cell_record(cell: SweepCell, result: RunResult, cores: int) -> dict[str, Any]:
    """The cell's entry in sweep.json from its run's result: numbers from run.json, or the error.

    The spread is run.json's "unprofiled_spread_ms" when it has one, else computed from its
    "unprofiled_steps_ms" (StepStats); the median likewise.
    """
    record = empty_cell(cell, cores)
    if not result.ok:
        return dict(record, status=FAILED, error=result.message or "the run failed", exit_code=result.exit_code)
    run = result.run or {}
    stats = StepStats.of(run.get("unprofiled_steps_ms") or [])
    spread = run.get("unprofiled_spread_ms")
    if not (isinstance(spread, list) and len(spread) == 4 and all(_number(x) is not None for x in spread)):
        spread = stats.rounded_spread() if stats is not None else None
    median = _number(run.get("unprofiled_median_ms"))
    if median is None and stats is not None:
        median = round(stats.median, 4)
    return dict(
        record,
        status=DONE,
        exit_code=EXIT_OK,
        median_ms=_number(run.get("median_ms")),
        unprofiled_median_ms=median,
        unprofiled_spread_ms=spread,
        unprofiled_steps=stats.n if stats is not None else None,
    )


def best_index(cells: list[dict[str, Any]]) -> int | None:
    """The finished cell with the lowest unprofiled median (the first of equals); None when none finished."""
    best: tuple[float, int] | None = None
    for i, c in enumerate(cells):
        ms = _number(c.get("unprofiled_median_ms"))
        if c.get("status") == DONE and ms is not None and (best is None or ms < best[0]):
            best = (ms, i)
    return best[1] if best else None


def _is_our_sweep(data: Any) -> bool:
    return isinstance(data, dict) and data.get("sweep") == SWEEP_VERSION and isinstance(data.get("cells"), list)


#: The only names a cell's run folder has (SweepCell.run): a name read from sweep.json is data, and
#: any other ("..", ".", "", "a/b", an absolute path) is not a cell of ours.
CELL_FOLDER = re.compile(rf"(?:{'|'.join(map(re.escape, MODES))})-[1-9][0-9]{{0,5}}x[1-9][0-9]{{0,5}}")


def _cell_folder_name(cell: Any) -> str | None:
    name = cell.get("run") if isinstance(cell, dict) else None
    return name if isinstance(name, str) and CELL_FOLDER.fullmatch(name) else None


def is_sweep_folder(path: Path) -> bool:
    """Whether `path` is a folder holding a sweep.json (whether it reads is `load_sweep`'s to say)."""
    return path.is_dir() and (path / SWEEP_JSON).is_file()


def load_sweep(folder: Path) -> dict[str, Any]:
    """FOLDER/sweep.json, checked: raises SweepError with one line when it is not a sweep of ours.

    Cells keep their fields; numbers that are not finite numbers read as None, and `best` is
    recomputed (a hand-edited file cannot point at a failed or missing cell).
    """
    path = Path(folder) / SWEEP_JSON
    try:
        data = read_json_object(path)
    except (OSError, ValueError) as exc:  # each one line, naming the file
        raise SweepError(str(exc)) from None
    if not _is_our_sweep(data):
        raise SweepError(f"{path} is not a branchscope sweep (no \"sweep\": {SWEEP_VERSION} and \"cells\" list)")
    cells = []
    for i, c in enumerate(data["cells"]):
        ok = (
            isinstance(c, dict)
            and c.get("mode") in MODES
            and all(isinstance(c.get(k), int) and not isinstance(c.get(k), bool) and c[k] >= 1 for k in ("interop", "intra"))
            and _cell_folder_name(c) is not None
        )
        if not ok:
            raise SweepError(f"{path}: cell {i} needs a mode, inter-op and intra-op thread counts and a run folder")
        cell = dict(c)
        for key in ("median_ms", "unprofiled_median_ms"):
            cell[key] = _number(c.get(key))
        spread = c.get("unprofiled_spread_ms")
        cell["unprofiled_spread_ms"] = [float(x) for x in spread] if (
            isinstance(spread, list) and len(spread) == 4 and all(_number(x) is not None for x in spread)
        ) else None  # fmt: skip
        if cell.get("status") not in (DONE, FAILED, NOT_RUN):
            cell["status"] = NOT_RUN
        cells.append(cell)
    return dict(data, cells=cells, best=best_index(cells))


# ---------------------------------------------------------------- the sweep folder


class SweepFolder:
    """DIR for one sweep: `open()` checks and locks it (as RunFolder does a run's), `close()` unlocks."""

    def __init__(self, out: Path, cells: list[SweepCell], *, overwrite: bool = False) -> None:
        self.out = Path(out)
        self.cells = cells
        self.overwrite = overwrite
        self._fd: int | None = None
        self._created = False

    def open(self) -> SweepFolder:
        self._fd, self._created = lock_folder(self.out, "sweep")
        try:
            self._check()
        except BaseException:
            self.close()
            raise
        return self

    def _earlier_sweep(self) -> set[str] | None:
        """The cell folders DIR's sweep.json lists; None when DIR holds no sweep.json of ours."""
        try:
            data = read_json_object(self.out / SWEEP_JSON, follow_symlinks=False)
        except (OSError, ValueError):
            return None
        if not _is_our_sweep(data):
            return None
        return {name for c in data["cells"] if (name := _cell_folder_name(c)) is not None}

    def _check(self) -> None:
        out = self.out
        entries = os.listdir(out)
        earlier = self._earlier_sweep()
        ours = files_written_by_branchscope(out)
        if earlier is not None:
            ours |= earlier | {SWEEP_JSON, SWEEP_JSON + ".tmp"}  # the .tmp: a sweep killed while writing
        # A cell's folder must be a folder itself: a run never follows a link (or a file) out of DIR,
        # --overwrite or not.
        in_the_way = [c.run for c in self.cells if c.run in entries and not real_dir(out / c.run)]
        if in_the_way:
            raise RunFolderError(f"--out {out}: {in_the_way[0]} is in the way of a cell's run folder and is not a folder")
        foreign = sorted(n for n in entries if not n.startswith(STAGING_PREFIX) and n not in ours)
        if foreign and not self.overwrite:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise RunFolderError(
                f"--out {out} holds files branchscope did not write ({shown}); choose a new or empty folder, "
                "or pass --overwrite to write beside them"
            )
        for name in sorted((earlier or set()) - {c.run for c in self.cells}):
            self._drop_earlier_cell(out / name)

    @staticmethod
    def _drop_earlier_cell(folder: Path) -> None:
        """Removes what branchscope wrote in an earlier sweep's cell folder, and the folder if that empties it."""
        if not real_dir(folder):
            return
        remove_files_written(folder, files_written_by_branchscope(folder))  # run.json last
        remove_leftover_staging(folder)
        try:
            folder.rmdir()
        except OSError:
            pass

    def close(self) -> None:
        if self._created:
            try:
                self.out.rmdir()  # only when empty
            except OSError:
                pass
            self._created = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SweepFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- running


@dataclass
class SweepResult:
    exit_code: int
    out: Path
    #: sweep.json as last written (None when the sweep never started).
    sweep: dict[str, Any] | None = None
    message: str | None = None
    cancelled_by: int | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK


def validate_sweep(req: SweepRequest) -> str | None:
    """What is wrong with the request's axes (one line), or None."""
    for name, values in (("--modes", req.modes), ("--interop", req.interop), ("--intra", req.intra)):
        if not values:
            return f"{name} needs at least one value"
    bad = [m for m in req.modes if m not in MODES]
    if bad:
        return f"--modes {bad[0]!r} is not one of: {', '.join(MODES)}"
    for name, values in (("--interop", req.interop), ("--intra", req.intra)):
        low = [v for v in values if v < 1]
        if low:
            return f"{name} must be at least 1, not {low[0]}"
    return None


def run_sweep(
    req: SweepRequest,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    cancel: CancelFlag | None = None,
) -> SweepResult:
    """Runs every cell of the sweep in turn; never raises for a failed cell or sweep.

    `on_event` receives {"event": "sweep", "out", "sweep"} once sweep.json is first written, then
    {"event": "progress", "index", "step", "of"} during a cell and {"event": "cell", "index", "of",
    "out", "folder", **the cell's record, "best"} after each (index counts from 0, as sweep.json's
    cells). Exit code: 0 when some cell finished (failed cells are in sweep.json), the first failure's
    when none did, 2 when the request or DIR is refused, 128 + signal when `cancel` was set.
    """
    out = Path(req.out)
    problem = validate_sweep(req)
    if problem:
        return SweepResult(EXIT_BAD_INPUT, out, message=problem)
    cells = req.cells()
    try:  # what would fail every cell (a missing model file, a bad --device) fails the sweep at once
        validate(req.run_request(cells[0]))
    except RunError as exc:
        return SweepResult(exc.exit_code, out, message=str(exc))
    emit = on_event or (lambda event: None)
    cores = usable_cores()
    folder = SweepFolder(out, cells, overwrite=req.overwrite)
    try:
        folder.open()
    except RunFolderError as exc:
        return SweepResult(EXIT_BAD_INPUT, out, message=str(exc))
    try:
        sweep: dict[str, Any] = {
            "sweep": SWEEP_VERSION,
            "demo": req.demo,
            "model": str(Path(req.model).resolve()) if req.model is not None else None,
            "modes": list(req.modes),
            "interop": list(req.interop),
            "intra": list(req.intra),
            "steps": req.steps,
            "warmup": req.warmup,
            "device": req.device,
            "cores": cores,
            "complete": False,
            "cancelled": None,
            "best": None,
            "cells": [empty_cell(c, cores) for c in cells],
        }
        try:
            write_json_atomic(out / SWEEP_JSON, sweep, indent=1)
        except OSError as exc:
            return SweepResult(EXIT_BAD_INPUT, out, message=f"cannot write {out / SWEEP_JSON}: {describe_os_error(exc, with_file=False)}")
        emit({"event": "sweep", "out": str(out), "sweep": sweep})
        first_failure: RunResult | None = None
        for index, cell in enumerate(cells):
            if cancel is not None and cancel.is_set():
                break

            def progress(event: dict[str, Any], index: int = index) -> None:
                if event.get("event") == "progress":
                    emit({"event": "progress", "index": index, "step": event.get("step"), "of": event.get("of")})

            result = run_profile(req.run_request(cell), progress, cancel)
            if result.cancelled_by is not None:
                break
            record = cell_record(cell, result, cores)
            sweep["cells"][index] = record
            sweep["best"] = best_index(sweep["cells"])
            if not result.ok and first_failure is None:
                first_failure = result
            _save(out, sweep)
            emit({"event": "cell", "index": index, "of": len(cells), "out": str(out),
                  "folder": str(out / cell.run), **record, "best": sweep["best"]})  # fmt: skip
        if cancel is not None and cancel.is_set():
            signum = cancel.signum or signal.SIGTERM
            sweep["cancelled"] = signal.Signals(signum).name
            _save(out, sweep)
            done = sum(1 for c in sweep["cells"] if c["status"] != NOT_RUN)
            return SweepResult(
                128 + signum,
                out,
                sweep,
                message=f"cancelled by {signal.Signals(signum).name}; {done} of {len(cells)} cells ran, the rest are marked not run",
                cancelled_by=signum,
            )
        sweep["complete"] = True
        _save(out, sweep)
        if sweep["best"] is None and first_failure is not None:
            return SweepResult(first_failure.exit_code, out, sweep, message=f"no cell ran: {first_failure.message}")
        return SweepResult(EXIT_OK, out, sweep)
    finally:
        folder.close()


def _save(out: Path, sweep: dict[str, Any]) -> None:
    """Rewrites sweep.json atomically; a failed write (disk full) leaves the last one and the sweep goes on."""
    try:
        write_json_atomic(out / SWEEP_JSON, sweep, indent=1)
    except OSError:
        pass


def stop_with_parent(cancel: CancelFlag) -> None:
    """Started by the window ($BRANCHSCOPE_PARENT_PID set): cancel the sweep when the window dies,
    through the SIGTERM the kernel then sends (PR_SET_PDEATHSIG), as the runner does."""
    expected = os.environ.get(PARENT_PID_ENV, "")
    if not expected.isdigit():
        return
    if set_death_signal(signal.SIGTERM) and os.getppid() != int(expected):
        cancel.set(signal.SIGTERM)


# ---------------------------------------------------------------- tables


def _ms(value: Any) -> str:
    number = _number(value)
    return f"{number:.2f}" if number is not None else "-"


def markdown_table(sweep: dict[str, Any]) -> str:
    """One row per cell: the cell, unprofiled median, spread (min, q1–q3, max), profiled median, notes."""
    rows = [
        "| cell | unprofiled median ms | spread ms (min, q1–q3, max) | steps | profiled median ms | notes |",
        "| --- | ---: | --- | ---: | ---: | --- |",
    ]
    best = sweep.get("best")
    for i, c in enumerate(sweep.get("cells") or []):
        spread = c.get("unprofiled_spread_ms")
        spread_text = (
            f"{_ms(spread[0])}, {_ms(spread[1])}–{_ms(spread[2])}, {_ms(spread[3])}"
            if isinstance(spread, list) and len(spread) == 4 else "-"
        )  # fmt: skip
        notes = []
        if i == best:
            notes.append("best")
        if c.get("oversubscribed"):
            notes.append(f"oversubscribed (> {sweep.get('cores')} cores)")
        if c.get("status") == FAILED:
            notes.append(f"failed: {c.get('error')}")
        elif c.get("status") == NOT_RUN:
            notes.append("not run")
        label = f"{c.get('mode')} {c.get('interop')}×{c.get('intra')}"
        steps = c.get("unprofiled_steps")
        rows.append(
            f"| {label} | {_ms(c.get('unprofiled_median_ms'))} | {spread_text} | {steps if isinstance(steps, int) else '-'} | "
            f"{_ms(c.get('median_ms'))} | "
            f"{'; '.join(notes).replace('|', '/')} |"
        )
    return "\n".join(rows)
