"""The runs and opened traces of a window, without Qt: what the runs list shows and what the
workspace draws.

An `Entry` is a finished run (its `RunSpec` and `run.json`), a run folder read from disk, or an
opened trace file (several rank files merged into one entry). `Runs` keeps them in order, with:

- the entry shown (`current`) and a cache of the loaded traces of the few most recently shown
  entries (`trace_cache`; the others are read from disk again when shown);
- the speedup of each run: the baseline's unprofiled median step ÷ this run's (run.json
  "unprofiled_steps_ms" through `StepStats`), and whether the two are within noise (their
  interquartile ranges overlap). Runs compare only with runs of their own model: each model's
  baseline is the one the user set (`set_baseline`), else its most recent sequential 1×1 run.

Runs persist: `saved_runs(root)` lists the complete runs under the runs root (the sessions that
`run_controller.default_runs_dir` makes), `entry_for_path(path)` makes the entry of a run folder or
trace file opened from disk, labelled from its run.json or the trace's "branchscope" object.

Views follow a `Runs` through `RunsObserver` (the Qt table model in `app/runs_table.py` is one).
No Qt here, so it is tested without a display.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from branchscope.profiling.files import open_regular, read_json_object
from branchscope.profiling.run.protocol import RunRequest
from branchscope.profiling.trace.merge import folder_traces
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.reader import check_trace_path
from branchscope.profiling.trace.run_info import RunInfo
from branchscope.profiling.trace.step_stats import StepStats, unprofiled_stats
from branchscope.profiling.trace.step_stats import speedup as stats_speedup

try:  # ISA-L inflates faster than zlib; the stdlib stays the fallback (as in the trace reader).
    from isal.igzip import IGzipFile as _GzipFile
except ImportError:  # pragma: no cover - isal is a declared dependency
    _GzipFile = gzip.GzipFile  # type: ignore[misc,assignment]

if TYPE_CHECKING:
    from branchscope.profiling.trace.model import Trace

#: Traces kept in memory; older entries are read again from disk when shown.
TRACE_CACHE = 4
#: Session folders under the runs root (`default_runs_dir`) and run folders in them (`RunController.start`).
SESSION_NAME = re.compile(r"\d{8}-\d{6}-\d+")
RUN_NAME = re.compile(r"\d{3,}-[A-Za-z0-9_.-]+")
RUN_JSON = "run.json"


@dataclass(frozen=True)
class RunSpec:
    """What to run: a demo or a model file, a mode and thread counts (the runner's arguments)."""

    mode: str
    interop: int
    intra: int
    steps: int = 5
    demo: str | None = None
    model: str | None = None
    warmup: int | None = None
    input_shapes: tuple[str, ...] = ()
    dtype: str | None = None
    #: Seconds before the runner stops the worker (None: the runner's default).
    timeout: float | None = None
    #: Processes (ranks) of a distributed run; 1: one worker.
    nproc: int = 1

    @property
    def model_key(self) -> str:
        """Identifies the model across runs (runs compare only with runs of one model)."""
        if self.demo:
            return f"demo:{self.demo}"
        key = f"file:{os.path.abspath(self.model or '')}"
        if self.input_shapes:
            key += f" inputs {' '.join(self.input_shapes)} {self.dtype or 'float32'}"
        return key

    @property
    def model_label(self) -> str:
        return self.demo or os.path.basename(self.model or "?")

    def request(self, out: Path) -> RunRequest:
        """The runner's request for this run, writing into `out`."""
        optional: dict[str, Any] = {}  # unset here: the request's own defaults
        if self.warmup is not None:
            optional["warmup"] = self.warmup
        if self.dtype:
            optional["dtype"] = self.dtype
        if self.timeout is not None:
            optional["timeout"] = float(self.timeout)
        if self.nproc != 1:
            optional["nproc"] = self.nproc
        return RunRequest(
            mode=self.mode,
            interop=self.interop,
            intra=self.intra,
            out=out,
            demo=self.demo,
            model=Path(self.model) if self.model else None,
            steps=self.steps,
            input_shapes=self.input_shapes,
            **optional,
        )

    def runner_arguments(self, out: Path) -> list[str]:
        return self.request(out).argv() + ["--jsonl"]


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def spec_from_run(run: dict[str, Any]) -> RunSpec | None:
    """The `RunSpec` that would repeat a run.json's run; None when it does not say enough.

    A TorchScript archive is repeatable only when run.json lists its "input_shapes".
    """
    mode, interop, intra = run.get("mode"), _int(run.get("interop")), _int(run.get("intra"))
    model, source = run.get("model"), run.get("source")
    if not isinstance(mode, str) or interop is None or intra is None or not isinstance(model, str):
        return None
    common: dict[str, Any] = dict(mode=mode, interop=interop, intra=intra)
    if _int(run.get("steps")) is not None and run["steps"] > 0:
        common["steps"] = run["steps"]
    if _int(run.get("warmup")) is not None and run["warmup"] >= 0:
        common["warmup"] = run["warmup"]
    if _int(run.get("nproc")) is not None and run["nproc"] > 1:
        common["nproc"] = run["nproc"]
    if source == "demo" and model.startswith("demo "):
        return RunSpec(demo=model[len("demo ") :], **common)
    if source == "torchscript":
        shapes = run.get("input_shapes")
        if not isinstance(shapes, list) or not shapes or not all(isinstance(s, str) for s in shapes):
            return None
        dtype = run.get("dtype") if isinstance(run.get("dtype"), str) else None
        return RunSpec(model=model, input_shapes=tuple(shapes), dtype=dtype, **common)
    if source == "py":
        return RunSpec(model=model, **common)
    return None


@dataclass(eq=False)
class Entry:
    """A row of the runs list: a finished run, or a trace file that was opened."""

    label: str
    trace_path: Path
    spec: RunSpec | None = None
    run: dict[str, Any] | None = None
    #: The loaded trace, or None when it is not among the traces kept in memory.
    trace: Trace | None = None
    #: Further rank files merged with `trace_path` into one trace.
    more_paths: tuple[Path, ...] = ()
    #: The trace's "branchscope" object, for a trace opened without its run.json.
    info: RunInfo | None = None
    _stats: tuple[object, StepStats | None] | None = dataclasses.field(default=None, repr=False)

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file this entry's trace is read from."""
        return (self.trace_path, *self.more_paths)

    @property
    def median_ms(self) -> float | None:
        """The median profiled step (run.json "median_ms"); `stats` holds the unprofiled steps."""
        m = (self.run or {}).get("median_ms")
        return float(m) if isinstance(m, (int, float)) and not isinstance(m, bool) else None

    @property
    def stats(self) -> StepStats | None:
        """Median and spread of the unprofiled steps (the honest numbers); None without a run.json."""
        if self._stats is None or self._stats[0] is not self.run:
            self._stats = (self.run, unprofiled_stats(self.run))
        return self._stats[1]

    @property
    def mode(self) -> str | None:
        if self.spec is not None:
            return self.spec.mode
        for source in (self.run or {}, {"mode": self.info.mode} if self.info else {}):
            if isinstance(source.get("mode"), str):
                return source["mode"]
        return None

    @property
    def threads(self) -> tuple[int, int] | None:
        """(inter-op, intra-op) threads, when known."""
        if self.spec is not None:
            return self.spec.interop, self.spec.intra
        run = self.run or {}
        if _int(run.get("interop")) is not None and _int(run.get("intra")) is not None:
            return run["interop"], run["intra"]
        if self.info is not None and self.info.interop is not None and self.info.intra is not None:
            return self.info.interop, self.info.intra
        return None

    @property
    def model_key(self) -> str | None:
        """Which model ran (`RunSpec.model_key`); None for a trace that does not say."""
        if self.spec is not None:
            return self.spec.model_key
        model = (self.run or {}).get("model")
        if not isinstance(model, str):
            return None
        if (self.run or {}).get("source") == "demo" and model.startswith("demo "):
            return f"demo:{model[len('demo ') :]}"
        return f"file:{os.path.abspath(model)}"

    @property
    def title(self) -> str:
        """How the window's title and the runs list name it: model · mode · threads."""
        parts = [self.label]
        if self.mode:
            parts.append(self.mode)
        if self.threads:
            parts.append(f"{self.threads[0]}×{self.threads[1]}")
        return " · ".join(parts)


class RunsObserver(Protocol):
    """What follows a `Runs` (a Qt item model calls its begin/end methods from these)."""

    def rows_about_to_be_inserted(self, first: int, last: int) -> None: ...
    def rows_inserted(self) -> None: ...
    def rows_about_to_be_removed(self, first: int, last: int) -> None: ...
    def rows_removed(self) -> None: ...
    def rows_changed(self, first: int, last: int) -> None: ...


class Runs:
    """The entries in list order (see the module docstring)."""

    def __init__(self, trace_cache: int = TRACE_CACHE):
        if trace_cache < 1:
            raise ValueError(f"trace_cache must be at least 1, not {trace_cache}")
        self.trace_cache = trace_cache
        self._entries: list[Entry] = []
        #: Index of the entry shown, -1 if none.
        self.current = -1
        #: Entry indices, least recently shown first (the cache evicts from the front).
        self._shown_order: list[int] = []
        #: The baselines the user set: model key -> entry.
        self._baselines: dict[str | None, int] = {}
        self._last_set: int | None = None
        #: Each model's default baseline, worked out once per change of the list.
        self._defaults: dict[str | None, int] | None = None
        self._observers: list[RunsObserver] = []

    # ---- the list ---------------------------------------------------------------------------
    @property
    def entries(self) -> list[Entry]:
        """The entries themselves, in order (change them through `Runs`, not this list)."""
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, k: int) -> Entry:
        return self._entries[k]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def add_observer(self, observer: RunsObserver) -> None:
        self._observers.append(observer)

    def append(self, entry: Entry) -> int:
        """List `entry` last; returns its index."""
        return self.extend([entry])

    def extend(self, entries: Sequence[Entry]) -> int:
        """List `entries` last, in one insertion; returns the index of the first (len(self) if none)."""
        k = len(self._entries)
        if not entries:
            return k
        for o in self._observers:
            o.rows_about_to_be_inserted(k, k + len(entries) - 1)
        self._entries.extend(entries)
        self._defaults = None
        for o in self._observers:
            o.rows_inserted()
        self._speedups_changed()
        return k

    def remove(self, k: int) -> Entry:
        """Take entry k out of the list (indices after it move up by one)."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        for o in self._observers:
            o.rows_about_to_be_removed(k, k)
        entry = self._entries.pop(k)
        self._defaults = None

        def moved(i: int) -> int:
            return i - 1 if i > k else i

        self._shown_order = [moved(i) for i in self._shown_order if i != k]
        self.current = -1 if self.current == k else moved(self.current)
        self._baselines = {key: moved(b) for key, b in self._baselines.items() if b != k}
        if self._last_set is not None:
            self._last_set = None if self._last_set == k else moved(self._last_set)
        for o in self._observers:
            o.rows_removed()
        self._speedups_changed()
        return entry

    # ---- shown entry and trace cache --------------------------------------------------------
    def load(self, k: int, read: Callable[[Sequence[Path]], Trace]) -> tuple[Trace, bool]:
        """Entry k's trace, read with `read(paths)` if it is not in memory; and whether it was read.

        Raises what `read` raises, with the entry unchanged.
        """
        e = self._entries[k]
        if e.trace is not None:
            return e.trace, False
        e.trace = read(e.paths)
        return e.trace, True

    def mark_shown(self, k: int) -> None:
        """Entry k is now the one shown: keep its trace, and those of the few shown before it."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        self.current = k
        self._shown_order = [i for i in self._shown_order if i != k] + [k]
        for i in self._shown_order[: -self.trace_cache]:
            self._entries[i].trace = None
        self._shown_order = self._shown_order[-self.trace_cache :]

    @property
    def cached(self) -> list[int]:
        """Entries whose traces are kept, least recently shown first."""
        return list(self._shown_order)

    # ---- baseline and speedup ---------------------------------------------------------------
    @property
    def baseline(self) -> int | None:
        """The baseline the user set last (None: none set; each model then has its default).

        Setting k makes k its model's baseline (`set_baseline`); setting None drops every set baseline.
        """
        return self._last_set

    @baseline.setter
    def baseline(self, k: int | None) -> None:
        if k is None:
            self.reset_baseline()
        else:
            self.set_baseline(k)

    def set_baseline(self, k: int) -> None:
        """Entry k becomes what every run of its model is compared with."""
        if not 0 <= k < len(self._entries):
            raise IndexError(k)
        self._baselines[self._entries[k].model_key] = k
        self._last_set = k
        self._speedups_changed()

    def reset_baseline(self, k: int | None = None) -> None:
        """Back to the default baseline for entry k's model (k None: for every model)."""
        if k is None:
            self._baselines.clear()
        else:
            self._baselines.pop(self._entries[k].model_key, None)
        if self._last_set is not None and self._last_set not in self._baselines.values():
            self._last_set = None
        self._speedups_changed()

    def has_set_baseline(self, k: int) -> bool:
        """Whether entry k's model has a baseline the user set."""
        return self._entries[k].model_key in self._baselines

    def default_baseline(self, k: int) -> int | None:
        """The most recent sequential 1×1 run of entry k's model with unprofiled step times."""
        if self._defaults is None:
            self._defaults = {
                e.model_key: b  # the latest wins
                for b, e in enumerate(self._entries)
                if e.model_key is not None
                and e.mode == "sequential"
                and e.threads == (1, 1)
                and e.stats is not None
            }
        return self._defaults.get(self._entries[k].model_key)

    def baseline_of(self, k: int) -> int | None:
        """The entry that entry k is compared with, or None."""
        set_by_user = self._baselines.get(self._entries[k].model_key)
        return set_by_user if set_by_user is not None else self.default_baseline(k)

    def is_baseline(self, k: int) -> bool:
        return self.baseline_of(k) == k

    def speedup(self, k: int) -> float | None:
        """The baseline's unprofiled median step ÷ entry k's (None where either is unknown)."""
        b = self.baseline_of(k)
        if b is None:
            return None
        return stats_speedup(self._entries[b].stats, self._entries[k].stats)

    def within_noise(self, k: int) -> bool | None:
        """Whether entry k and its baseline's interquartile ranges overlap (None: no comparison)."""
        b = self.baseline_of(k)
        if b is None or b == k:
            return None
        base, this = self._entries[b].stats, self._entries[k].stats
        if base is None or this is None:
            return None
        return this.within_noise(base)

    def missing_baseline(self, k: int) -> RunSpec | None:
        """The sequential 1×1 run that entry k's model lacks to compare with (its other settings
        kept), or None: it has a baseline, or entry k is no run the window can repeat."""
        spec = self._entries[k].spec
        if spec is None or self.baseline_of(k) is not None:
            return None
        return dataclasses.replace(spec, mode="sequential", interop=1, intra=1)

    def summary_line(self, k: int) -> str:
        """Entry k in one sentence a class follows: what ran on what, and how it compares with
        its baseline, e.g. "4 branches on 2 inter-op threads: 1.90× faster than sequential 1×1,
        within noise: no"."""
        e = self._entries[k]
        branches = (e.run or {}).get("branches")
        info = e.info or (e.trace.run_info if e.trace is not None else None)
        n = len(branches) if isinstance(branches, list) else (len(info.branches) if info else 0)
        what = f"{n} branch{'es' if n != 1 else ''}" if n else "the model"
        threads = e.threads
        if e.mode == "fork" and threads:
            what += f" on {threads[0]} inter-op thread{'s' if threads[0] != 1 else ''}"
        elif e.mode == "sequential":
            what += " one after another on the main thread" if n else ""
        elif e.mode:
            what += f" ({e.mode})"
        if threads:
            what += f", {threads[1]} intra-op thread{'s' if threads[1] != 1 else ''} each"
        b = self.baseline_of(k)
        if e.stats is None:
            if e.run is None and not n:  # a trace from elsewhere
                return "a trace opened from disk: its own step times without the profiler are not in it, so no speedup"
            return f"{what}: no step times without the profiler in this run, so no speedup"
        if b is None:
            return f"{what}: median step {e.stats.median:.2f} ms; no sequential 1×1 run of this model to compare with yet"
        if b == k:
            return f"{what}: median step {e.stats.median:.2f} ms, the baseline of this model's speedups"
        base = self._entries[b]
        name = base.mode or base.label
        if base.threads:
            name += f" {base.threads[0]}×{base.threads[1]}"
        s = self.speedup(k)
        if s is None:
            return what
        how = f"{s:.2f}× faster than" if s >= 1 else f"{1 / s:.2f}× slower than"
        noise = self.within_noise(k)
        return f"{what}: {how} {name}, within noise: {'yes' if noise else 'no'}"

    def _speedups_changed(self) -> None:
        self._defaults = None
        if self._entries:
            for o in self._observers:
                o.rows_changed(0, len(self._entries) - 1)


# ---- runs from disk -------------------------------------------------------------------------
def runs_root() -> Path:
    """~/.cache/branchscope/runs, where each window's session folder goes.

    $XDG_CACHE_HOME counts only when it is an absolute path (the XDG rule).
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "branchscope" / "runs"


def read_run_json(folder: Path) -> dict[str, Any] | None:
    """The run.json of a complete run in `folder`; None when there is none, it is unreadable or
    not complete, or the trace file it names is missing."""
    try:
        run = read_json_object(folder / RUN_JSON)  # a regular file of a sane size, never a FIFO
    except (OSError, ValueError):
        return None
    if run.get("complete") is not True:
        return None
    traces = _rank_traces(run) if "ranks" in run else [_trace_name(run)]
    if not traces or None in traces:
        return None
    try:
        if not all(stat.S_ISREG(os.stat(folder / str(trace)).st_mode) for trace in traces):
            return None
    except OSError:
        return None
    return run


#: A rank's trace in a distributed run's folder (run.json "ranks": [{"rank", "trace": "rank-R/NAME"}]).
RANK_TRACE = re.compile(r"rank-\d+/[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def _rank_traces(run: dict[str, Any]) -> list[str] | None:
    """The rank traces a distributed run's run.json lists, rank 0 first; None when it lists none or
    one that is not a rank folder's file."""
    ranks = run.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        return None
    names = [r.get("trace") if isinstance(r, dict) else None for r in ranks]
    if not all(isinstance(n, str) and RANK_TRACE.fullmatch(n) for n in names):
        return None
    return [str(n) for n in names]


def _trace_name(run: dict[str, Any]) -> str | None:
    """The trace file a run.json names: a plain file name in its folder."""
    name = run.get("trace", "trace.json.gz")
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        return None
    return name


def _model_label(run: dict[str, Any]) -> str | None:
    model = run.get("model")
    if not isinstance(model, str) or not model:
        return None
    if run.get("source") == "demo" and model.startswith("demo "):
        return model[len("demo ") :]
    return os.path.basename(model.rstrip("/")) or model


def _run_entry(folder: Path, run: dict[str, Any]) -> Entry:
    label = _model_label(run) or folder.name
    ranks = _rank_traces(run) if "ranks" in run else None
    if ranks:  # a distributed run: its ranks' traces, merged as one job
        return Entry(label, folder / ranks[0], spec=spec_from_run(run), run=run, more_paths=tuple(folder / n for n in ranks[1:]))
    trace = folder / (_trace_name(run) or "trace.json.gz")
    return Entry(label, trace, spec=spec_from_run(run), run=run)


def subfolders(parent: Path, name: re.Pattern[str]) -> list[Path]:
    """The folders right in `parent` whose names match `name` (links never followed; [] if unreadable)."""
    try:
        with os.scandir(parent) as entries:
            return [
                Path(e.path) for e in entries if name.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def saved_runs(root: Path, *, exclude: Path | None = None) -> list[Entry]:
    """The complete runs kept under the runs root, oldest first, as entries (traces not loaded).

    Reads session folders named as `default_runs_dir` names them and the run folders in them
    (`exclude`: a session left out, e.g. the window's own); folders without a complete run.json
    and its trace are skipped, links are never followed, and nothing is written.
    """
    found: list[tuple[float, str, Entry]] = []
    for session in subfolders(Path(root), SESSION_NAME):
        if exclude is not None and session == Path(exclude):
            continue
        for folder in subfolders(session, RUN_NAME):
            run = read_run_json(folder)
            if run is None:
                continue
            try:
                when = (folder / RUN_JSON).stat().st_mtime
            except OSError:
                continue
            found.append((when, str(folder), _run_entry(folder, run)))
    found.sort(key=lambda f: (f[0], f[1]))
    return [e for _, _, e in found]


#: How much of a trace is read to find its "branchscope" object, and how large that object may be.
_SCAN_CHUNK = 1 << 18
_INFO_LIMIT = 4 << 20
_INFO_KEY = b'"branchscope"'
_INFO_START = re.compile(rb'"branchscope"\s*:\s*')


def _find_info(stream: IO[bytes]) -> dict[str, Any] | None:
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
            more = stream.read(_SCAN_CHUNK)
            eof = not more
            buf += more
            continue
        buf, start = buf[i:], 0
        m = _INFO_START.match(buf)
        value: Any = None
        need_more = False
        if m is None:
            need_more = (
                not eof and not buf[len(_INFO_KEY) :].strip()
            )  # whitespace so far: the colon may follow
        else:
            try:
                value, _end = decoder.raw_decode(buf[m.end() :].decode("utf-8", errors="replace"))
            except ValueError:
                need_more = not eof
        if isinstance(value, dict):
            return value
        if need_more and len(buf) < _INFO_LIMIT:
            more = stream.read(_SCAN_CHUNK)
            eof = not more
            buf += more
            continue
        start = 1  # not the object: look further


def read_trace_info(path: Path) -> dict[str, Any] | None:
    """A trace file's top-level "branchscope" object (mode, threads, …), found without decoding the
    trace; None when the file has none or cannot be read (loading it says why)."""
    try:
        check_trace_path(path)
        with open(open_regular(path), "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            if not gzipped:
                return _find_info(f)
            with _GzipFile(fileobj=f, mode="rb") as gz:
                return _find_info(gz)  # type: ignore[arg-type]
    except (OSError, EOFError, ValueError, zlib.error, RecursionError):
        return None
    except Exception:  # isal's own error type for broken gzip data
        return None


def _trace_label(path: Path) -> str:
    """A trace file's name without its extensions; a run folder's name for its generic trace.json(.gz)."""
    name = path.name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    if name in ("trace", "trace.raw") and path.parent.name:
        return path.parent.name
    return name


def entry_for_path(path: str | os.PathLike[str]) -> Entry:
    """The entry of a run folder or trace file opened from disk (its trace not loaded).

    A run folder needs a complete run.json; a trace file uses the run.json beside it when that
    names it, else its own "branchscope" object (mode, threads). Raises `TraceFormatError` (the
    message names the path) for a path that is neither.
    """
    p = Path(path)
    if p.is_dir():
        run = read_run_json(p)
        if run is not None:
            return _run_entry(p, run)
        # A job's folder of rank traces (torchrun, tensorboard_trace_handler): the ranks of one job.
        # (A folder whose run.json is incomplete or broken is a failed run, not such a folder.)
        files = [] if (p / RUN_JSON).exists() else folder_traces(p)
        if not files:
            raise TraceFormatError(
                f"{p}: is a folder without a complete run (run.json and its trace) or trace files (*.json, *.json.gz)"
            )
        label = f"{p.name} · {len(files)} rank{'s' if len(files) != 1 else ''}"
        return Entry(label, files[0], more_paths=tuple(files[1:]))
    check_trace_path(p)
    run = read_run_json(p.parent)
    if run is not None and _trace_name(run) == p.name:
        return _run_entry(p.parent, run)
    obj = read_trace_info(p)
    info = RunInfo.parse(obj) if obj is not None else None
    label = _trace_label(p)
    if obj is not None:  # a "model" there (not written today) names the model
        label = _model_label({"model": obj.get("model"), "source": obj.get("source")}) or label
    return Entry(label, p, info=info)
