"""Export what branchscope opens to a file other tools open: `export_trace(source, out)` writes
Perfetto's protobuf for OUT.pftrace / OUT.perfetto-trace (`export_perfetto`) and Chrome JSON for
OUT.json / OUT.json.gz (`export_chrome`).

A source is anything `sources.open_source` opens (a run folder, a trace file, a rank folder, a
distributed run, a sweep's cell) or a loaded `Trace`. A job of several ranks is written as ONE
trace with a process per rank (`export_common`): Perfetto's UI opens one file at a time, and the
ranks are wanted on one timeline, on the clock they were merged on.

Files: an existing OUT is refused unless `force` (and then only a regular file is replaced), and
OUT is never the source itself nor inside the source's folder, `force` or not; the export is written to a temporary name in OUT's folder and renamed to OUT at the end, so a failed
or killed export leaves no half-written OUT (a killed one may leave its ".OUT.*.part" file).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

from branchscope.profiling.trace.model import Trace, TraceFormatError

#: OUT's endings and the format each gets.
PERFETTO, CHROME = "perfetto", "chrome"
SUFFIXES = {".pftrace": PERFETTO, ".perfetto-trace": PERFETTO, ".json": CHROME, ".json.gz": CHROME}


def export_format(out: str | os.PathLike[str]) -> str:
    """PERFETTO or CHROME by OUT's ending; TraceFormatError (one line) for any other."""
    name = Path(out).name.lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix) and len(name) > len(suffix):
            return SUFFIXES[suffix]
    endings = ", ".join(SUFFIXES)
    raise TraceFormatError(f"{out}: cannot tell the format to write: name it with one of {endings}")


def export_trace(source: str | os.PathLike[str] | Trace, out: str | os.PathLike[str], force: bool = False) -> Path:
    """Writes `source` (a path `open_source` opens, or a `Trace`: a job's every rank, `whole_trace`)
    to `out` in the format its name says; returns `out`. Raises TraceFormatError (one line) for a source that is no trace, an
    unknown ending, or an `out` that exists (unless `force`: then a regular file is replaced)."""
    out = Path(out)
    fmt = export_format(out)
    check_out(out, force)
    check_not_source(source, out)
    trace = whole_trace(source) if isinstance(source, Trace) else load_source_trace(source)
    write_file(out, lambda f: _writer(fmt)(trace, f), force=force, gzipped=out.name.lower().endswith(".gz"))
    return out


def job_ranks(trace: Trace) -> int | None:
    """How many ranks exporting `trace` writes when it is a job's (all of them, `whole_trace`);
    None for any other trace."""
    from branchscope.profiling.trace.rank_job import job_of

    job = job_of(trace)
    return None if job is None else len(job)


def whole_trace(trace: Trace) -> Trace:
    """What exporting `trace` writes: a large job's every rank, read from its files as `branchscope
    export FOLDER` reads them (the window holds only the ranks in view); any other trace as it is.
    Slow for a large job: the window calls it on its export's thread."""
    from branchscope.profiling.trace.merge import load_traces
    from branchscope.profiling.trace.rank_job import job_of

    job = job_of(trace)
    if job is None or len(job.loaded(trace)) >= len(job):
        return trace
    return load_traces(list(job.paths))


def load_source_trace(path: str | os.PathLike[str]) -> Trace:
    """The trace of what `path` is (`sources.open_source`); a sweep folder is refused, naming its cells."""
    from branchscope.profiling.trace.sources import SWEEP, open_source

    src = open_source(path)
    if src.kind == SWEEP:
        raise TraceFormatError(f"{path}: is a sweep folder: export one of its cells' run folders")
    return src.load()


def _writer(fmt: str) -> Callable[[Trace, IO[bytes]], None]:
    if fmt == PERFETTO:
        from branchscope.profiling.trace.export_perfetto import write_perfetto

        return write_perfetto
    from branchscope.profiling.trace.export_chrome import write_chrome

    return write_chrome


def check_not_source(source: str | os.PathLike[str] | Trace, out: Path) -> None:
    """Refuses an OUT that is the source (its file, one of a job's files) or lies inside the source
    folder (a run's, a job's): an export never replaces what it reads, --force or not."""
    paths = [Path(p) for p in source.path.split(" + ")] if isinstance(source, Trace) else [Path(source)]
    folder = out.parent.resolve()
    for path in paths:
        if out.exists() and path.exists() and os.path.samefile(path, out):
            raise TraceFormatError(f"{out}: is the source being exported: write to another file")
        if path.is_dir() and (folder == path.resolve() or path.resolve() in folder.parents):
            raise TraceFormatError(f"{out}: is inside the source folder {path}: write it elsewhere")


def check_out(out: Path, force: bool) -> None:
    """Refuses an OUT that exists (but for a regular file with `force`) or whose folder does not."""
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not force:
        raise TraceFormatError(f"{out}: exists; pass --force to replace it")
    if mode is not None and not stat.S_ISREG(mode):
        raise TraceFormatError(f"{out}: exists and is not a regular file, so it is not replaced")
    if not out.parent.is_dir():
        raise TraceFormatError(f"{out}: its folder {out.parent} does not exist")


def write_file(out: Path, write: Callable[[IO[bytes]], None], *, force: bool, gzipped: bool = False) -> None:
    """Runs `write` on a temporary file in OUT's folder, then renames it to OUT: OUT is whole or
    absent. Without `force` an OUT made meanwhile is not replaced (a hard link, which fails if it
    exists, where the file system has them)."""
    fd, tmp = _temporary(out)
    try:
        with open(fd, "wb") as f:
            if gzipped:
                with _gzip_writer(f) as gz:
                    write(gz)
            else:
                write(f)
        _publish(tmp, out, force)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _temporary(out: Path) -> tuple[int, str]:
    """A new file ".OUT.XXXXXXXX.part" beside OUT, open for writing, made with the permissions any
    file gets here (0o666 less the umask, applied by the system: `tempfile.mkstemp` makes 0o600,
    and changing the umask to read it would change it for every thread of the process)."""
    for _ in range(100):
        tmp = str(out.parent / f".{out.name}.{secrets.token_hex(4)}.part")
        try:
            return os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{out.parent}: no free temporary name for {out.name}")


def _publish(tmp: str, out: Path, force: bool) -> None:
    if force:
        check_out(out, force)
        os.replace(tmp, out)
        return
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise TraceFormatError(f"{out}: exists; pass --force to replace it") from None
    except OSError:  # no hard links here: the check just made is the best there is
        check_out(out, force)
        os.replace(tmp, out)
        return
    os.unlink(tmp)


def _gzip_writer(f: IO[bytes]) -> IO[bytes]:
    """A gzip stream onto `f` (ISA-L's where installed: several times faster than zlib's)."""
    try:
        from isal.igzip import IGzipFile

        return IGzipFile(fileobj=f, mode="wb", compresslevel=1)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - isal is a declared dependency
        import gzip

        return gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1)  # type: ignore[return-value]
