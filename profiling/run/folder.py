"""The folder a run writes its results into (`--out DIR`): checked, locked, staged, committed.

Promises (docs/promises.md):

- A folder holding files branchscope did not write is refused (exit 2, nothing touched) unless the
  user passes `--overwrite`. What branchscope wrote is what the folder's own run.json lists under
  "files" (run folders of versions before that list: the fixed names they wrote).
- A run writes into a staging folder inside DIR (`.branchscope-staging-*`, hidden) and moves its
  results into DIR only once they are complete: a failed, cancelled or killed run leaves DIR as it
  was. Staging folders left by a killed runner are removed by the next run on DIR.
- run.json goes in last, after every file it names: a folder whose run.json exists holds that run's
  files, whatever moment the runner was killed at. (The earlier run.json is removed first, so between
  the two there is a moment where DIR holds no complete run, never a mixed one.)
- One run at a time per folder: the folder itself is locked (flock on its descriptor, no lock file),
  and a second run fails at once with one clear line.

No torch and no Qt here.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, BinaryIO, Self

import msgspec

from branchscope.profiling.files import UnreadableFile, read_json_object
from branchscope.profiling.trace.records import (
    NODE_JSON_NAME,
    RANK_DIR,
    RUN_JSON,
    FailureRecord,
    RunRecord,
    encode_record,
    lenient,
    read_run_record,
)
from branchscope.profiling.trace.sweep_records import CELL_FOLDER, SWEEP_JSON, SweepRecord, is_sweep_json

#: Where a failed run's files that tell why are kept (`RunFolder.keep_failure`): the plan TorchScript
#: could not compile and its whole message. A folder of that name is ours only while FAILURE_JSON in
#: it is ours, and then only the files it lists are; the next failure replaces them, a success removes them.
FAILED_DIR = "failed-run"
FAILURE_JSON = "failure.json"
FAILURE_FILES = ("plan.py", "plan-error.txt")

#: The files a run writes: all that a folder written by a branchscope before run.json listed its
#: files can hold, and (alone or in a rank's folder) all that a run.json's "files" may name.
LEGACY_FILES = frozenset({RUN_JSON, "trace.json.gz", "plan.py", "worker.log"})
STAGING_PREFIX = ".branchscope-staging-"
#: Every name run.json's "files" may hold: the shapes branchscope writes, nothing else. A name read
#: from a run.json is data: any other ("..", ".", "", "a/../b", an absolute path) is ignored.
RUN_FILE_NAME = re.compile(
    rf"(?:(?:{RANK_DIR.pattern}/)?(?:{'|'.join(map(re.escape, sorted(LEGACY_FILES)))})|{NODE_JSON_NAME.pattern})"
)  # a multi-node run's node-R.json too (`run/nodes.py`)


class RunFolderError(Exception):
    """DIR cannot take this run; the message is one line for `error: …`."""


def describe_os_error(exc: OSError, *, with_file: bool = True) -> str:
    """'no space left on device' and the like: the strerror, lower case, with the file when known."""
    if isinstance(exc, UnreadableFile):
        return str(exc)
    what = (exc.strerror or str(exc)).rstrip(".")
    what = what[:1].lower() + what[1:]
    return f"{what} ({exc.filename})" if exc.filename and with_file else what


def files_written_by_branchscope(folder: Path) -> set[str]:
    """The files in `folder` that an earlier branchscope run wrote, as names relative to it ("run.json",
    "rank-0/trace.json.gz"); empty when it has no complete run.json of ours.

    Only names of the shapes branchscope writes (RUN_FILE_NAME) count: whatever else run.json says
    is ignored, so no name read from it reaches outside `folder` or names a folder.
    """
    run = read_run_record(folder, follow_symlinks=False)  # never a link, a FIFO or a device
    if run is None or not run.complete:
        return set()
    if run.files is not None:
        return {RUN_JSON, *(name for name in run.files if RUN_FILE_NAME.fullmatch(name))}
    if run.trace_clock is not None and run.mode is not None:  # a run folder of an earlier version
        return set(LEGACY_FILES)
    return set()


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def real_dir(path: Path) -> bool:
    """A folder itself, not a link to one."""
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def failure_files(folder: Path) -> list[str] | None:
    """The files of `folder`/failed-run/ that a failed run of ours kept there (FAILURE_JSON among
    them), or None when there is no such folder of ours (none, a link, a file, no failure.json of ours)."""
    failed = folder / FAILED_DIR
    if not real_dir(failed):
        return None
    try:
        record = lenient(FailureRecord, read_json_object(failed / FAILURE_JSON, follow_symlinks=False))
    except (OSError, ValueError):
        return None
    if record.failure != 1:
        return None
    return [FAILURE_JSON, *(name for name in record.files if name in FAILURE_FILES)]


def _remove_failure(folder: Path) -> None:
    """Removes what failure_files lists (failure.json last), then failed-run/ when that empties it."""
    names = failure_files(folder)
    if names is None:
        return
    failed = folder / FAILED_DIR
    for name in sorted(names, key=lambda n: n == FAILURE_JSON):
        st = _lstat(failed / name)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            (failed / name).unlink(missing_ok=True)
    try:
        failed.rmdir()  # only when empty: whatever else the user put there stays
    except OSError:
        pass


def foreign_entries(folder: Path, ours: set[str]) -> list[str]:
    """What in `folder` branchscope did not write, given `ours` (names relative to it): top-level
    entries, and the entries of a rank's folder ("rank-0/notes.md"). Staging folders are ours, and
    a failed run's folder (FAILED_DIR) as far as its failure.json lists."""
    foreign = []
    kept = failure_files(folder)
    for name in sorted(os.listdir(folder)):
        if name.startswith(STAGING_PREFIX) or name in ours:
            continue
        if name == FAILED_DIR and kept is not None:
            foreign += [f"{name}/{n}" for n in sorted(os.listdir(folder / name)) if n not in kept]
            continue
        if RANK_DIR.fullmatch(name) and real_dir(folder / name) and any(n.startswith(name + "/") for n in ours):
            foreign += [f"{name}/{n}" for n in sorted(os.listdir(folder / name)) if f"{name}/{n}" not in ours]
            continue
        foreign.append(name)
    return foreign


def remove_files_written(folder: Path, names: Collection[str], *, keep: Collection[str] = ()) -> None:
    """Removes the files `names` (relative to `folder`, as `files_written_by_branchscope` gives them)
    but `keep`, run.json last, then a rank's folder when that leaves it empty.

    Each name must have a shape branchscope writes, and each folder on the way must be a folder
    itself, not a link: nothing outside `folder` is touched. A name that is a folder is left alone
    (a file is unlinked; a link as a link).
    """
    dirs = set()
    for name in sorted(set(names) - set(keep), key=lambda n: n.endswith(RUN_JSON)):
        if not RUN_FILE_NAME.fullmatch(name):
            continue
        path = folder / name
        if "/" in name:
            dirs.add(name.split("/")[0])
            if not real_dir(folder / name.split("/")[0]):
                continue
        st = _lstat(path)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            path.unlink(missing_ok=True)
    for d in sorted(dirs):
        if real_dir(folder / d):
            try:
                (folder / d).rmdir()  # only when empty: whatever else the user keeps there stays
            except OSError:
                pass


def sweep_cells(folder: Path) -> set[str] | None:
    """The cell folders `folder`/sweep.json lists (names of the shape branchscope writes only);
    None when it holds no sweep.json of ours."""
    try:
        data = read_json_object(folder / SWEEP_JSON, follow_symlinks=False)
    except (OSError, ValueError):
        return None
    if not is_sweep_json(data):
        return None
    return {c.run for c in SweepRecord.parse(data).cells if c.run is not None and CELL_FOLDER.fullmatch(c.run)}


#: What a sweep folder holds of its own besides its cells (the .tmp: a sweep killed while writing).
SWEEP_FILES = frozenset({SWEEP_JSON, SWEEP_JSON + ".tmp"})


def _ours_by_name(folder: Path) -> set[str]:
    """A folder without a manifest (run.json listing its files): the entries named as branchscope
    names what it writes (RUN_FILE_NAME), at the top and in a rank's folder."""
    names = set()
    for name in os.listdir(folder):
        if RANK_DIR.fullmatch(name) and real_dir(folder / name):
            names |= {f"{name}/{n}" for n in os.listdir(folder / name) if RUN_FILE_NAME.fullmatch(f"{name}/{n}")}
        elif RUN_FILE_NAME.fullmatch(name):
            names.add(name)
    return names


def _files_ours(folder: Path, cells: set[str]) -> set[str]:
    """The run files in `folder` that are ours: its manifest's, or by name in a run folder without one."""
    return files_written_by_branchscope(folder) or (set() if cells else _ours_by_name(folder))


def not_ours(folder: Path) -> list[str]:
    """What the run or sweep folder `folder` holds that branchscope did not write, as names relative
    to it ("my-notes.md", "fork-2x1/notes.md"): by its manifest (run.json's "files", sweep.json's
    cells, failed-run/failure.json's files), or, in a folder written before manifests, every entry not
    named as branchscope names its files. Links count as not ours (never followed); staging folders
    as ours. Raises OSError when `folder` cannot be read."""
    cells = sweep_cells(folder) or set()
    ours = _files_ours(folder, cells) | cells | (SWEEP_FILES if cells else set())
    foreign = foreign_entries(folder, ours)
    foreign += [n for n in sorted(ours) if (st := _lstat(folder / n)) is not None and stat.S_ISLNK(st.st_mode)]  # a link where ours was
    for cell in sorted(cells):
        path = folder / cell
        if real_dir(path):
            foreign += [f"{cell}/{n}" for n in not_ours(path)]
        elif _lstat(path) is not None:
            foreign.append(cell)  # a link or a file where a cell's folder should be
    return foreign


def remove_if_all_ours(folder: Path) -> list[str]:
    """Removes the run or sweep folder `folder` when everything in it is branchscope's (`not_ours`
    is empty): each file by its manifest, never a link followed, never a whole tree, the folders
    last and only when empty. Returns what is not ours (then nothing is removed); [] also when
    `folder` is not a folder itself (a link: left alone) or cannot be read."""
    if not real_dir(folder):
        return []
    try:
        foreign = not_ours(folder)
    except OSError:
        return []
    if foreign:
        return foreign
    _remove_ours(folder)
    return []


def _remove_ours(folder: Path) -> None:
    cells = sweep_cells(folder) or set()
    for cell in sorted(cells):
        if real_dir(folder / cell):
            _remove_ours(folder / cell)
    remove_files_written(folder, _files_ours(folder, cells))  # run.json last
    _remove_failure(folder)
    remove_leftover_staging(folder)
    for name in sorted(SWEEP_FILES, reverse=True):  # sweep.json last
        st = _lstat(folder / name)
        if st is not None and stat.S_ISREG(st.st_mode):
            (folder / name).unlink(missing_ok=True)
    try:
        folder.rmdir()  # only when empty: something written meanwhile stays, with its folder
    except OSError:
        pass


def lock_folder(out: Path, what: str, *, shared: bool = False) -> tuple[int, bool]:
    """Make `out` if needed and lock it (flock on the folder itself: no lock file is written);
    returns the descriptor holding the lock and whether the folder was made. Raises RunFolderError
    with one line when it is not a folder, cannot be made, or another `what` ("run", "sweep") holds it.
    `shared`: a shared lock, which the nodes of one multi-node run hold together (`run/nodes.py`).
    """
    created = False
    try:
        if out.exists() and not out.is_dir():
            raise RunFolderError(f"--out {out} exists and is not a folder")
        if not out.exists():
            out.mkdir(parents=True)
            created = True
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except FileExistsError:
        raise RunFolderError(f"--out {out} exists and is not a folder") from None
    except OSError as exc:
        raise RunFolderError(f"cannot write to --out {out}: {describe_os_error(exc)}") from None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RunFolderError(f"another branchscope {what} is writing to {out}; wait for it or choose another --out") from None
        raise RunFolderError(f"cannot lock --out {out}: {describe_os_error(exc)}") from None
    return fd, created


def remove_leftover_staging(folder: Path) -> None:
    """Removes the staging folders of runners that were killed (the caller holds the folder's lock,
    so no live run writes there)."""
    for name in os.listdir(folder):
        if name.startswith(STAGING_PREFIX) and real_dir(folder / name):
            shutil.rmtree(folder / name, ignore_errors=True)


def names_text(names: list[str], most: int = 5) -> str:
    """"a, b, c and 4 more": the first `most` names of a list that may be long."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def write_atomic(path: Path, write: Callable[[BinaryIO], object], *, gz: bool = False) -> None:
    """Writes `path` through `write(file)` into PATH.tmp, then renames it: readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with gzip.open(tmp, "wb", compresslevel=3) if gz else open(tmp, "wb") as f:
            write(f)  # type: ignore[arg-type]
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_record_atomic(path: Path, record: msgspec.Struct) -> None:
    """A record (run.json, sweep.json) as branchscope writes it (`records.encode_record`), atomically."""
    write_atomic(path, lambda f: f.write(encode_record(record)))


def write_json_atomic(path: Path, data: Any, indent: int | None = None) -> None:
    write_atomic(path, lambda f: f.write(json.dumps(data, indent=indent).encode("utf-8")))


#: What every run writes into DIR, whatever its mode and ranks: a file of these names that is not ours
#: refuses DIR before the run, --overwrite or not. (A file not ours where a run's other files go,
#: trace.json.gz or plan.py, fails the commit instead, DIR as it was.)
ALWAYS_WRITTEN = frozenset({RUN_JSON, "worker.log"})


def remove_if_empty(folder: Path) -> None:
    """Removes `folder` when it is empty; leaves it as it is otherwise (or when it is gone)."""
    try:
        folder.rmdir()
    except OSError:
        pass


class LockedFolder:
    """A folder branchscope writes into, locked while it does: `open()` locks it (making it when
    there is none, `lock_folder`) and prepares it (`_prepare`), closing again when that fails;
    `close()` removes it when this made it and it stayed empty, then unlocks it."""

    #: What the lock is taken for, in the line that refuses a second one ("run", "sweep").
    kind = "run"
    #: Several holders at once (the nodes of a multi-node run share OUT).
    shared = False

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self._fd: int | None = None
        self._created = False

    def open(self) -> Self:
        self._fd, self._created = lock_folder(self.out, self.kind, shared=self.shared)
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise
        return self

    def _prepare(self) -> None:
        """Checks the locked folder before anything is written; raises RunFolderError."""

    def close(self) -> None:
        if self._created:
            remove_if_empty(self.out)  # a failed first run leaves no folder behind
            self._created = False
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunFolder(LockedFolder):
    """DIR for one run: `open()` checks and locks it, `staging` receives the files, `commit()` moves
    them in (run.json last), `close()` removes what is left of the staging and unlocks."""

    def __init__(self, out: Path, *, overwrite: bool = False) -> None:
        super().__init__(out)
        self.overwrite = overwrite
        self.staging: Path | None = None

    def _prepare(self) -> None:
        self._check_and_stage()

    def _check_and_stage(self) -> None:
        try:
            remove_leftover_staging(self.out)
        except OSError as exc:
            raise RunFolderError(f"cannot read --out {self.out}: {describe_os_error(exc)}") from None
        self._check_foreign()
        try:
            self.staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=self.out))
        except OSError as exc:
            raise RunFolderError(f"cannot write to --out {self.out}: {describe_os_error(exc)}") from None

    def _check_foreign(self) -> None:
        """Refuses DIR when it holds files branchscope did not write (unless --overwrite)."""
        out = self.out
        try:
            foreign = foreign_entries(out, files_written_by_branchscope(out))
        except OSError as exc:
            raise RunFolderError(f"cannot read --out {out}: {describe_os_error(exc)}") from None
        if foreign and not self.overwrite:
            raise RunFolderError(
                f"--out {out} holds files branchscope did not write ({names_text(foreign)}); choose a new or empty "
                "folder, or pass --overwrite to write beside them"
            )
        in_the_way = [name for name in foreign if name in ALWAYS_WRITTEN]
        if in_the_way:
            raise RunFolderError(
                f"--out {out} holds files branchscope did not write where a run writes its own ({names_text(in_the_way)}); "
                "--overwrite writes beside such files, never over them: move them or choose another --out"
            )

    def commit(self, run: RunRecord) -> RunRecord:
        """Moves the staged files into DIR and writes run.json (with "files": {name: bytes}) last.

        Returns the run.json written. Files of the earlier run that this one does not write are removed
        (a rank's folder too, once that empties it); files branchscope did not write are never touched,
        in DIR or in a rank's folder: one where this run's own file goes fails the commit (OSError),
        DIR as it was.
        """
        assert self.staging is not None, "commit() before open()"
        stage, out = self.staging, self.out
        files: dict[str, int] = {}
        for p in sorted(stage.iterdir()):
            if p.name == RUN_JSON:
                continue
            if RANK_DIR.fullmatch(p.name) and real_dir(p):  # a rank's folder: its files, one level
                files.update({f"{p.name}/{q.name}": q.stat().st_size for q in sorted(p.iterdir()) if q.is_file()})
            elif p.is_file() and not p.is_symlink():
                files[p.name] = p.stat().st_size
        files = {name: size for name, size in files.items() if RUN_FILE_NAME.fullmatch(name)}
        run = msgspec.structs.replace(run, files=files)
        tmp = stage / RUN_JSON
        tmp.write_bytes(encode_record(run))
        for d in sorted({name.split("/")[0] for name in files if "/" in name}):
            st = _lstat(out / d)  # a rank's folder in DIR: a folder itself, or none yet
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise OSError(errno.EEXIST, f"{d} is in the way and is not a folder", str(out / d))
        earlier = files_written_by_branchscope(out)
        for name in [RUN_JSON, *files]:  # a file not ours that appeared where ours go since open(): never replaced
            if name not in earlier and _lstat(out / name) is not None:
                raise OSError(errno.EEXIST, "a file branchscope did not write is where the run's own goes", str(out / name))
        (out / RUN_JSON).unlink(missing_ok=True)  # from here on DIR claims no complete run
        remove_files_written(out, earlier - {RUN_JSON}, keep=set(files))
        for name in files:
            if "/" in name:
                (out / name.split("/")[0]).mkdir(exist_ok=True)
            os.replace(stage / name, out / name)
        os.replace(tmp, out / RUN_JSON)
        _remove_failure(out)  # a success: the last failure's files no longer say anything about DIR
        return run

    def keep_failure(self, source: Path, message: str) -> list[Path]:
        """Keeps a failed run's FAILURE_FILES found in `source` (its staging folder, or a rank's in it)
        in DIR/failed-run/, replacing an earlier failure's; returns where they now are. Nothing is
        kept (an empty list) when the run left none, or DIR/failed-run is in the way: a link, a file,
        or a folder without a failure.json of ours. The earlier run's results in DIR are untouched."""
        names = [n for n in FAILURE_FILES if (p := source / n).is_file() and not p.is_symlink()]
        failed = self.out / FAILED_DIR
        if not names or (_lstat(failed) is not None and failure_files(self.out) is None):
            return []
        _remove_failure(self.out)
        failed.mkdir(exist_ok=True)
        if not real_dir(failed):
            return []
        for name in names:
            os.replace(source / name, failed / name)
        record = FailureRecord(failure=1, files=names, message=message)
        tmp = failed / f".{FAILURE_JSON}.tmp"
        tmp.write_bytes(encode_record(record))
        os.replace(tmp, failed / FAILURE_JSON)
        return [failed / n for n in names]

    def close(self) -> None:
        """Removes the staging folder (and DIR when this run made it and it stayed empty); unlocks."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None
        super().close()


class SweepFolder(LockedFolder):
    """DIR for one sweep: `open()` checks and locks it (as RunFolder does a run's), `close()` unlocks.
    `cells`: the folders of the sweep's cells (`SweepCell.run`); what an earlier sweep of ours holds
    for other cells is removed (`_drop_earlier_cell`)."""

    kind = "sweep"

    def __init__(self, out: Path, cells: list[str], *, overwrite: bool = False) -> None:
        super().__init__(out)
        self.cells = cells
        self.overwrite = overwrite

    def _prepare(self) -> None:
        out = self.out
        entries = os.listdir(out)
        earlier = sweep_cells(out)  # the cell folders DIR's sweep.json lists; None: no sweep.json of ours
        ours = files_written_by_branchscope(out)
        if earlier is not None:
            ours |= earlier | SWEEP_FILES
        # A cell's folder must be a folder itself: a run never follows a link (or a file) out of DIR,
        # --overwrite or not.
        in_the_way = [cell for cell in self.cells if cell in entries and not real_dir(out / cell)]
        if in_the_way:
            raise RunFolderError(f"--out {out}: {in_the_way[0]} is in the way of a cell's run folder and is not a folder")
        foreign = sorted(n for n in entries if not n.startswith(STAGING_PREFIX) and n not in ours)
        if foreign and not self.overwrite:
            raise RunFolderError(
                f"--out {out} holds files branchscope did not write ({names_text(foreign)}); choose a new or empty folder, "
                "or pass --overwrite to write beside them"
            )
        for name in sorted((earlier or set()) - set(self.cells)):
            self._drop_earlier_cell(out / name)

    @staticmethod
    def _drop_earlier_cell(folder: Path) -> None:
        """Removes what branchscope wrote in an earlier sweep's cell folder, and the folder if that empties it."""
        if not real_dir(folder):
            return
        remove_files_written(folder, files_written_by_branchscope(folder))  # run.json last
        remove_leftover_staging(folder)
        remove_if_empty(folder)
