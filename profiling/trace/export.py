"""Export what branchscope opens to a file other tools open: `export_trace(source, out)` writes
Perfetto's protobuf for OUT.pftrace / OUT.perfetto-trace (`export_perfetto`) and Chrome JSON for
OUT.json / OUT.json.gz (`export_chrome`).

A source is anything `sources.open_source` opens (a run folder, a trace file, a rank folder, a
distributed run, a sweep's cell) or a loaded `Trace`. A job of several ranks is written as ONE
trace with a process per rank (`export_common`): Perfetto's UI opens one file at a time, and the
ranks are wanted on one timeline, on the clock they were merged on.

Files: an existing OUT is refused unless `force` (and then only a regular file is replaced); the
export is written to a temporary name in OUT's folder and renamed to OUT at the end, so a failed
or killed export leaves no half-written OUT (a killed one may leave its ".OUT.*.part" file).
"""

from __future__ import annotations

import os
import stat
import tempfile
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
    """Writes `source` (a path `open_source` opens, or a `Trace`) to `out` in the format its name
    says; returns `out`. Raises TraceFormatError (one line) for a source that is no trace, an
    unknown ending, or an `out` that exists (unless `force`: then a regular file is replaced)."""
    out = Path(out)
    fmt = export_format(out)
    check_out(out, force)
    trace = source if isinstance(source, Trace) else load_source_trace(source)
    write_file(out, lambda f: _writer(fmt)(trace, f), force=force, gzipped=out.name.lower().endswith(".gz"))
    return out


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
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
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
