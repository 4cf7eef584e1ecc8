"""What the window makes of the files a user opens together, Qt-free: the sources gathered
(`gather`: trace files picked one by one that are the ranks of one large job become one source,
opened as their folder opens), each source's trace read (`read_source`: a job of many ranks with
only the ranks in view loaded, `rank_job.open_view`), then the traces joined (`join_opened`):
files that are the ranks of one distributed job
(`merge.rank_groups`: same job, distinct ranks, overlapping clocks) become one trace, ranks side by
side on one clock, since comparing ranks is why one opens them together; allocator snapshots opened
together are the ranks of one job (they carry no job to tell); anything else stays its own, never
merged onto another's clock.

`app/trace_loader.py` runs these off the GUI thread; they import neither Qt nor torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from branchscope.profiling.trace.merge import (
    as_ranks,
    folder_traces,
    in_rank_order,
    merge_traces,
    rank_groups,
)
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.rank_job import ALL_RANKS_UP_TO, large_jobs, open_view
from branchscope.profiling.trace.reader import ProgressCallback
from branchscope.profiling.trace.snapshot import is_snapshot
from branchscope.profiling.trace.sources import RANK_TRACES, TRACE, Source


def gather(sources: Sequence[Source], progress: ProgressCallback | None = None) -> list[tuple[tuple[int, ...], Source]]:
    """The sources a user opened together, each with the positions of those it stands for: each
    as it is, except that trace files picked one by one that are the ranks of one job of more than
    `ALL_RANKS_UP_TO` ranks are one source, a folder of rank traces (`job_source`), which opens as
    their folder does: every rank summarised, the ranks in view loaded (`rank_job.large_jobs`
    summarises them, once). Smaller jobs are read whole and joined (`join_opened`), as their folder
    loads them whole."""
    lone = [k for k, s in enumerate(sources) if s.kind == TRACE]  # a run folder is never a rank picked alone
    if len(lone) <= ALL_RANKS_UP_TO:
        return [((k,), s) for k, s in enumerate(sources)]
    jobs = [[lone[i] for i in g] for g in large_jobs([sources[k].traces[0] for k in lone], progress=progress)]
    jobs = [g for g in jobs if len(g) > ALL_RANKS_UP_TO]
    taken = {k for g in jobs for k in g}
    gathered: list[tuple[tuple[int, ...], Source]] = [((k,), s) for k, s in enumerate(sources) if k not in taken]
    gathered += [(tuple(g), job_source([sources[k].traces[0] for k in g])) for g in jobs]
    return sorted(gathered, key=lambda item: item[0][0])


def job_source(files: Sequence[Path]) -> Source:
    """The source of rank trace files picked one by one, as their folder's: the folder they are
    in (their common one), its files those picked."""
    folder = Path(os.path.commonpath([os.path.abspath(f) for f in files]))
    folder = folder if folder.is_dir() else folder.parent
    return Source(folder, RANK_TRACES, tuple(in_rank_order(files)))


def recalled_as(source: Source, named: Sequence[Path]) -> list[Path]:
    """What the recent files keep of a source opened from the paths `named`: those paths, or, for
    rank files gathered into one job (`gather`) that are all of their folder's, that folder (it
    opens as the same job)."""
    if len(named) > 1 and source.kind == RANK_TRACES and _absolute(folder_traces(source.path)) == _absolute(source.traces):
        return [source.path]
    return list(named)


def _absolute(paths: Sequence[Path]) -> set[str]:
    return {os.path.abspath(p) for p in paths}


def read_source(paths: Sequence[str | os.PathLike[str]], progress: ProgressCallback | None = None) -> Trace:
    """The trace the window shows of one source's files: one file, every rank of a distributed run
    or folder of ranks, of a large job the ranks in view (`rank_job.open_view`)."""
    return open_view(list(paths), progress=progress)


@dataclass(frozen=True)
class Joined:
    """Traces opened together that show as one: the positions of its members among them, the trace
    they make, and, when several ranks were joined, those ranks."""

    members: tuple[int, ...]
    trace: Trace
    ranks: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """How lists name ranks joined: "ranks 0, 1"."""
        return "ranks " + ", ".join(str(r) for r in self.ranks)


def join_opened(opened: Sequence[tuple[Path, Trace]]) -> list[Joined]:
    """The traces opened together (each with the file that names it), joined as the module
    docstring says: ranks of one job each group, then the snapshots together; the rest alone."""
    snapshots = [k for k, (path, _) in enumerate(opened) if is_snapshot(path)]
    traces = [k for k in range(len(opened)) if k not in snapshots]
    groups = [[traces[i] for i in g] for g in rank_groups([opened[k][1] for k in traces])]
    if snapshots:
        groups.append(snapshots)
    joined = []
    for group in groups:
        if len(group) == 1:
            joined.append(Joined((group[0],), opened[group[0]][1]))
            continue
        ranked = as_ranks([opened[i][1] for i in group])
        ranks = tuple(sorted(int(t.rank or 0) for t in ranked))
        joined.append(Joined(tuple(group), merge_traces(ranked), ranks))
    return joined
