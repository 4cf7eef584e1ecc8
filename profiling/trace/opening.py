"""What the window makes of the files a user opens together, Qt-free: each source's trace read
(`read_source`: a job of many ranks with only the ranks in view loaded, `rank_job.open_view`), then
the traces joined (`join_opened`): files that are the ranks of one distributed job
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

from branchscope.profiling.trace.merge import as_ranks, merge_traces, rank_groups
from branchscope.profiling.trace.model import Trace
from branchscope.profiling.trace.rank_job import open_view
from branchscope.profiling.trace.reader import ProgressCallback
from branchscope.profiling.trace.snapshot import is_snapshot


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
