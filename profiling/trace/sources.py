"""One way to open what a user hands branchscope: `open_source(path)` tells what a path is and
which files hold its events, for the window and every sub-command (`open`, `inspect`, `compare`,
`memory`) alike.

A source is one of:

- a **run** folder: a complete run.json and the trace it names (or a trace file with the run.json
  of its run beside it);
- a **distributed run** folder: a top-level run.json listing its ranks, rank-R/ per rank;
- a **rank folder**: a job's folder of rank traces from elsewhere (torchrun,
  `tensorboard_trace_handler`): the trace files right in it, rank-N in name order;
- a **trace** file (a torch.profiler / Chrome trace, plain or gzipped), with the "branchscope"
  object of a run when it has one;
- a **snapshot**: an allocator snapshot (a pickle, told by its first bytes);
- a **sweep** folder: a sweep.json and a run folder per cell.

What a run.json or sweep.json says is data (`records`): the files a source loads are only names of
the shapes branchscope writes, right in its folder or a rank's folder. A path that is none of these
raises `TraceFormatError` with one line naming it. Several sources make one job (`load_job`): the
ranks of one distributed run, merged on one clock, or refused when they are not.

Qt-free and torch-free.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from branchscope.profiling.files import open_regular, read_json_object
from branchscope.profiling.trace import merge
from branchscope.profiling.trace.merge import (
    PERFETTO_SUFFIXES,
    as_ranks,
    folder_traces,
    load_many,
    load_source,
    load_traces,
    merge_traces,
    rank_groups,
    why_apart,
)
from branchscope.profiling.trace.model import Trace, TraceFormatError
from branchscope.profiling.trace.reader import ProgressCallback, check_trace_path
from branchscope.profiling.trace.records import (
    MODE_NAME,
    RANK_RUN,
    RUN_JSON,
    RunRecord,
    model_label,
    read_run_record,
)
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.snapshot import is_snapshot
from branchscope.profiling.trace.sweep_records import (
    CELL_FOLDER,
    DONE,
    FAILED,
    NOT_RUN,
    SWEEP_JSON,
    SweepRecord,
    is_sweep_json,
)

try:  # ISA-L inflates faster than zlib; the stdlib stays the fallback (as in the trace reader).
    from isal.igzip import IGzipFile as _GzipFile
except ImportError:  # pragma: no cover - isal is a declared dependency
    _GzipFile = gzip.GzipFile  # type: ignore[misc,assignment]

RUN, DISTRIBUTED_RUN, RANK_TRACES, TRACE, SNAPSHOT, SWEEP = (
    "run",
    "distributed run",
    "rank folder",
    "trace",
    "snapshot",
    "sweep",
)


@dataclass(frozen=True)
class Source:
    """What `open_source` found at `path` (see the module docstring)."""

    path: Path
    kind: str
    #: The files whose events make its trace, rank 0 first (a sweep has none).
    traces: tuple[Path, ...] = ()
    #: The run's run.json (a distributed run's top-level one).
    run: RunRecord | None = None
    #: A sweep folder's sweep.json.
    sweep: SweepRecord | None = None
    #: The trace's "branchscope" object, for a trace opened without its run.json.
    info: RunInfo | None = None

    @property
    def folder(self) -> Path:
        """The run's folder (a trace file's: the folder it is in)."""
        return self.path if self.path.is_dir() else self.path.parent

    @property
    def label(self) -> str:
        """How lists name it: the model of a run, a rank folder's name and ranks, a trace file's name."""
        if self.run is not None and self.run.model_label:
            return self.run.model_label
        if self.sweep is not None:
            return self.sweep.model_label or self.path.name
        if self.kind == RANK_TRACES:
            n = len(self.traces)
            return f"{self.path.name} · {n} rank{'s' if n != 1 else ''}"
        if self.info is not None:
            return model_label(self.info.model, self.info.source) or trace_label(self.path)
        return trace_label(self.path)

    def load(self, progress: ProgressCallback | None = None) -> Trace:
        """Its trace: one file as is, a job's ranks merged (`merge.load_traces`)."""
        if not self.traces:
            raise TraceFormatError(f"{self.path}: is a {self.kind}, not a trace")
        return load_traces(list(self.traces), progress=progress)

    def rank_runs(self) -> list[RunRecord | None]:
        """Each rank's own run.json of a distributed run (None for one that cannot be read)."""
        if self.run is None or self.run.ranks is None:
            return []
        out: list[RunRecord | None] = []
        for r in self.run.ranks:
            name = r.run if isinstance(r.run, str) and RANK_RUN.fullmatch(r.run) else None
            out.append(read_run_record((self.path / name).parent) if name else None)
        return out


def complete_run(folder: Path) -> RunRecord | None:
    """The run.json of a complete run in `folder`: complete, naming trace files of the shapes
    branchscope writes that are regular files there; None otherwise."""
    try:
        return _folder_run(folder)[0]
    except TraceFormatError:
        return None


def run_folder(folder: Path) -> Source:
    """The source of a (distributed) run's folder, its run.json read once; TraceFormatError (one
    line) when it holds no complete run."""
    run, names = _folder_run(folder)
    return Source(folder, DISTRIBUTED_RUN if run.distributed else RUN, tuple(folder / n for n in names), run=run)


def _folder_run(folder: Path) -> tuple[RunRecord, list[str]]:
    """A run folder's run.json and the traces it names; TraceFormatError saying what is wrong."""
    try:
        run = RunRecord.parse(read_json_object(folder / RUN_JSON))
    except (OSError, ValueError) as exc:  # each one line, naming the file
        raise TraceFormatError(f"{folder}: is a folder without a complete run: {exc}") from None
    if not run.complete:
        raise TraceFormatError(f"{folder}: is a folder without a complete run: its run.json is not of a finished run")
    names = run.trace_files()
    if not names:
        raise TraceFormatError(
            f"{folder}: is a folder without a complete run: its run.json names no trace of the shapes branchscope writes"
        )
    missing = [n for n in names if not _is_regular(folder / n)]
    if missing:
        raise TraceFormatError(f"{folder}: is a folder without a complete run: {missing[0]} is missing")
    return run, names


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def is_sweep_folder(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a folder holding a sweep.json (whether it reads is `read_sweep`'s to say)."""
    return Path(path).is_dir() and _is_regular(Path(path) / SWEEP_JSON)


def read_sweep(folder: Path) -> SweepRecord:
    """FOLDER/sweep.json as a record; TraceFormatError (one line) when it is no sweep of branchscope's."""
    path = Path(folder) / SWEEP_JSON
    try:
        data = read_json_object(path)
    except (OSError, ValueError) as exc:  # each one line, naming the file
        raise TraceFormatError(str(exc)) from None
    if not is_sweep_json(data):
        raise TraceFormatError(f'{path} is not a branchscope sweep (no "sweep" version and "cells" list)')
    sweep = SweepRecord.parse(data)
    for i, c in enumerate(sweep.cells):
        ok = (
            c.mode is not None
            and MODE_NAME.fullmatch(c.mode) is not None
            and all(v is not None and v >= 1 for v in (c.interop, c.intra))
            and c.run is not None
            and CELL_FOLDER.fullmatch(c.run) is not None
        )
        if not ok:
            raise TraceFormatError(f"{path}: cell {i} needs a mode, inter-op and intra-op thread counts and a run folder")
        if c.status not in (DONE, FAILED, NOT_RUN):
            c.status = NOT_RUN
    sweep.best = sweep.best_index()  # a hand-edited file cannot point at a failed or missing cell
    sweep.ties = sweep.tie_indices()  # the same; and a sweep of before ties gets them
    return sweep


def open_source(path: str | os.PathLike[str]) -> Source:
    """What `path` is (see the module docstring); raises TraceFormatError (one line naming it)."""
    p = Path(path)
    if p.is_dir():
        if is_sweep_folder(p):
            return Source(p, SWEEP, sweep=read_sweep(p))
        if os.path.lexists(p / RUN_JSON):
            return run_folder(p)
        # A job's folder of rank traces (torchrun, tensorboard_trace_handler): the ranks of one job.
        files = folder_traces(p)
        if not files:
            raise TraceFormatError(
                f"{p}: is a folder without a complete run (run.json and its trace), a sweep (sweep.json) "
                "or trace files (*.json, *.json.gz, *.pftrace, *.perfetto-trace, *.pb, gzipped or not)"
            )
        return Source(p, RANK_TRACES, tuple(files))
    check_trace_path(p)  # a regular file: a FIFO or a device is refused before it is opened
    if is_snapshot(p):
        return Source(p, SNAPSHOT, (p,))
    beside = complete_run(p.parent)
    if beside is not None and not beside.distributed and beside.trace_files() == [p.name]:
        return Source(p, RUN, (p,), run=beside)
    obj = read_trace_info(p)
    return Source(p, TRACE, (p,), info=RunInfo.parse(obj) if obj is not None else None)


def open_job(paths: Sequence[str | os.PathLike[str]]) -> Trace:
    """The trace of what the paths name (`open_source` each), as one job (`load_job`): what
    `inspect` and `memory` take."""
    return load_job([open_source(p) for p in paths])


def load_job(sources: Sequence[Source], *, progress: ProgressCallback | None = None) -> Trace:
    """One source's trace, or several sources' files merged as the ranks of one job. Traces of
    different jobs (another `distributedInfo`, clocks that do not overlap) are refused with why;
    allocator snapshots carry no job to tell, so with them the sources are taken as ranks."""
    if len(sources) == 1:
        return sources[0].load(progress)
    for s in sources:
        if s.kind == SWEEP:
            raise TraceFormatError(f"{s.path}: is a sweep folder; open its cells' run folders instead")
    files = [f for s in sources for f in s.traces]
    if len(files) > 1 and merge.POOL_WORKERS() > 1:  # read on every core (issue 23)
        traces = load_many(files, progress=progress)
    else:
        traces = [load_source(f, progress=progress) for f in files]
    if len(traces) == 1:
        return traces[0]
    if not any(s.kind == SNAPSHOT for s in sources):
        # Traces named one by one (files, or folders of ranks) must be the ranks of one job.
        groups = rank_groups(traces)
        if len(groups) > 1:
            names = [str(f) for f in files]
            raise TraceFormatError(f"not the ranks of one job, so not merged: {why_apart(traces, names, groups)}")
    return merge_traces(as_ranks(traces))


# ---------------------------------------------------------------- a trace's "branchscope" object

#: How much of a trace is read to find its "branchscope" object, and how large that object may be.
SCAN_CHUNK = 1 << 18
_INFO_LIMIT = 4 << 20
_INFO_KEY = b'"branchscope"'
_INFO_START = re.compile(rb'"branchscope"\s*:\s*')


def find_info(stream: IO[bytes]) -> dict[str, Any] | None:
    """The first `"branchscope": {...}` object of a JSON text, read a chunk at a time: the trace
    is never decoded as a whole, and memory stays bounded (by `_INFO_LIMIT`)."""
    decoder = json.JSONDecoder()
    buf, start, eof = b"", 0, False
    while True:
        i = buf.find(_INFO_KEY, start)
        if i < 0:
            if eof:
                return None
            keep = len(_INFO_KEY) - 1
            buf, start = buf[-keep:], 0
            more = stream.read(SCAN_CHUNK)
            eof = not more
            buf += more
            continue
        buf, start = buf[i:], 0
        m = _INFO_START.match(buf)
        value: Any = None
        need_more = False
        if m is None:
            need_more = not eof and not buf[len(_INFO_KEY) :].strip()  # whitespace so far: the colon may follow
        else:
            try:
                value, _end = decoder.raw_decode(buf[m.end() :].decode("utf-8", errors="replace"))
            except ValueError:
                need_more = not eof
        if isinstance(value, dict):
            return value
        if need_more and len(buf) < _INFO_LIMIT:
            more = stream.read(SCAN_CHUNK)
            eof = not more
            buf += more
            continue
        start = 1  # not the object: look further


def read_trace_info(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """A trace file's top-level "branchscope" object (mode, threads, …), found without decoding the
    trace; None when the file has none or cannot be read (loading it says why)."""
    try:
        check_trace_path(path)
        with open(open_regular(path), "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            if not gzipped:
                return find_info(f)
            with _GzipFile(fileobj=f, mode="rb") as gz:
                return find_info(gz)  # type: ignore[arg-type]
    except (OSError, EOFError, ValueError, zlib.error, RecursionError, TraceFormatError):
        return None
    except Exception:  # isal's own error type for broken gzip data
        return None


def trace_label(path: Path) -> str:
    """A trace file's name without its extensions; a run folder's name for its generic trace.json(.gz)."""
    name = path.name
    for suffixes in ((".gz",), (".json", *PERFETTO_SUFFIXES)):
        suffix = next((s for s in suffixes if name.endswith(s) and len(name) > len(s)), None)
        if suffix is not None:
            name = name[: -len(suffix)]
    if name in ("trace", "trace.raw") and path.parent.name:
        return path.parent.name
    return name
