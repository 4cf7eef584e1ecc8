"""The runs kept on disk, without Qt: the session folders under the runs root and the run
folders in them.

Each window writes its runs into a session folder of its own under `runs_root()`
(`run_controller.default_runs_dir` names it, `RunController.start` names the run folders in it);
`saved_runs(root)` lists the complete runs of every session as entries, for the runs list of a
later window.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from branchscope.app.run_entry import Entry
from branchscope.profiling.trace.model import TraceFormatError
from branchscope.profiling.trace.records import RUN_JSON
from branchscope.profiling.trace.sources import run_folder

#: Session folders under the runs root (`default_runs_dir`) and run folders in them (`RunController.start`).
SESSION_NAME = re.compile(r"\d{8}-\d{6}-\d+")
RUN_NAME = re.compile(r"\d{3,}-[A-Za-z0-9_.-]+")


def runs_root() -> Path:
    """~/.cache/branchscope/runs, where each window's session folder goes.

    $XDG_CACHE_HOME counts only when it is an absolute path (the XDG rule).
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "branchscope" / "runs"


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
            try:
                entry = Entry.of_source(run_folder(folder))  # only a complete run: run.json read once
                when = (folder / RUN_JSON).stat().st_mtime
            except (OSError, TraceFormatError):
                continue
            found.append((when, str(folder), entry))
    found.sort(key=lambda f: (f[0], f[1]))
    return [e for _, _, e in found]

