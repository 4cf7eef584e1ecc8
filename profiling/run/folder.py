"""The folder a run writes its results into (`--out DIR`): checked, locked, staged, committed.

Promises (README, "What branchscope promises"):

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
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

#: The run's description; written last.
RUN_JSON = "run.json"
#: Names a folder written by a branchscope before run.json listed its files.
LEGACY_FILES = frozenset({"run.json", "trace.json.gz", "plan.py", "worker.log"})
STAGING_PREFIX = ".branchscope-staging-"
#: The folders of a distributed run's ranks (rank-0, rank-1, …), listed in run.json's "files" as
#: "rank-R/NAME".
RANK_DIR = re.compile(r"rank-\d+")


class RunFolderError(Exception):
    """DIR cannot take this run; the message is one line for `error: …`."""


def describe_os_error(exc: OSError, *, with_file: bool = True) -> str:
    """'no space left on device' and the like: the strerror, lower case, with the file when known."""
    what = (exc.strerror or str(exc)).rstrip(".")
    what = what[:1].lower() + what[1:]
    return f"{what} ({exc.filename})" if exc.filename and with_file else what


def files_written_by_branchscope(folder: Path) -> set[str]:
    """The names in `folder` that an earlier branchscope run wrote (empty when it has no run.json of ours)."""
    try:
        run = json.loads((folder / RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(run, dict) or run.get("complete") is not True:
        return set()
    files = run.get("files")
    if isinstance(files, dict):
        names = {RUN_JSON, *(name for name in files if isinstance(name, str) and "/" not in name)}
        for name in files:
            if isinstance(name, str) and name.count("/") == 1 and RANK_DIR.fullmatch(name.split("/")[0]):
                names.add(name.split("/")[0])
        return names
    if "trace_clock" in run and "mode" in run:  # a run folder of an earlier version
        return set(LEGACY_FILES)
    return set()


def lock_folder(out: Path, what: str) -> tuple[int, bool]:
    """Make `out` if needed and lock it (flock on the folder itself: no lock file is written);
    returns the descriptor holding the lock and whether the folder was made. Raises RunFolderError
    with one line when it is not a folder, cannot be made, or another `what` ("run", "sweep") holds it.
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
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RunFolderError(f"another branchscope {what} is writing to {out}; wait for it or choose another --out") from None
        raise RunFolderError(f"cannot lock --out {out}: {describe_os_error(exc)}") from None
    return fd, created


def _remove(path: Path) -> None:
    """Removes a file, or a rank's folder, that an earlier run wrote (a link as a link)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class RunFolder:
    """DIR for one run: `open()` checks and locks it, `staging` receives the files, `commit()` moves
    them in (run.json last), `close()` removes what is left of the staging and unlocks."""

    def __init__(self, out: Path, *, overwrite: bool = False) -> None:
        self.out = Path(out)
        self.overwrite = overwrite
        self.staging: Path | None = None
        self._fd: int | None = None
        self._created = False

    def open(self) -> RunFolder:
        self._fd, self._created = lock_folder(self.out, "run")
        try:
            self._check_and_stage()
        except BaseException:
            self.close()
            raise
        return self

    def _check_and_stage(self) -> None:
        out = self.out
        entries = os.listdir(out)
        # We hold the lock, so no live run writes here: staging folders are leftovers of killed runners.
        for name in entries:
            if name.startswith(STAGING_PREFIX) and (out / name).is_dir() and not (out / name).is_symlink():
                shutil.rmtree(out / name, ignore_errors=True)
        foreign = sorted(n for n in entries if not n.startswith(STAGING_PREFIX) and n not in files_written_by_branchscope(out))
        if foreign and not self.overwrite:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise RunFolderError(
                f"--out {out} holds files branchscope did not write ({shown}); choose a new or empty folder, "
                "or pass --overwrite to write beside them"
            )
        try:
            self.staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out))
        except OSError as exc:
            raise RunFolderError(f"cannot write to --out {out}: {describe_os_error(exc)}") from None

    def commit(self, run: dict[str, Any]) -> dict[str, Any]:
        """Moves the staged files into DIR and writes run.json (with "files": {name: bytes}) last.

        Returns the run.json written. Files of the earlier run that this one does not write are removed;
        files branchscope did not write are replaced only when they share a name with ours and the
        user asked to overwrite.
        """
        assert self.staging is not None, "commit() before open()"
        stage = self.staging
        staged = sorted(
            p.name
            for p in stage.iterdir()
            if p.name != RUN_JSON and (p.is_file() or (RANK_DIR.fullmatch(p.name) and p.is_dir() and not p.is_symlink()))
        )
        files: dict[str, int] = {}
        for name in staged:
            if (stage / name).is_dir():  # a rank's folder: its files, one level
                files.update({f"{name}/{p.name}": p.stat().st_size for p in sorted((stage / name).iterdir()) if p.is_file()})
            else:
                files[name] = (stage / name).stat().st_size
        run = dict(run, files=files)
        tmp = stage / RUN_JSON
        tmp.write_text(json.dumps(run, indent=1), encoding="utf-8")
        earlier = files_written_by_branchscope(self.out)
        for name in staged:  # a folder in the way that branchscope did not write is never replaced
            target = self.out / name
            if (stage / name).is_dir() and (target.exists() or target.is_symlink()) and name not in earlier:
                raise OSError(errno.EEXIST, f"{name} is in the way and was not written by branchscope", str(target))
        (self.out / RUN_JSON).unlink(missing_ok=True)  # from here on DIR claims no complete run
        for name in sorted(earlier - {RUN_JSON}):
            if name in staged and not (stage / name).is_dir():
                continue  # replaced below
            _remove(self.out / name)
        for name in staged:
            os.replace(stage / name, self.out / name)
        os.replace(tmp, self.out / RUN_JSON)
        return run

    def close(self) -> None:
        """Removes the staging folder (and DIR when this run made it and it stayed empty); unlocks."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None
        if self._created:
            try:
                self.out.rmdir()  # only when empty: a failed first run leaves no folder behind
            except OSError:
                pass
            self._created = False
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None

    def __enter__(self) -> RunFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
