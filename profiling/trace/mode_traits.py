"""What every reader needs to know of an execution mode, as data: `ModeTraits`.

A mode (`profiling/run/modes/NAME.py`) declares its traits: the pool it runs a region's branches on
(`pool`: none, torch's inter-op pool, a pool of Python threads, CUDA streams), whether its run
measures each branch thread's wait for the GIL (`gil_measured`), whether speedups are measured
against it (`baseline`), and its words: how sentences name it (`title`), how a speedup's parts
name its plan (`plan_title`), how the runs list says what ran (`runs_as`) and how the advice names
its way of using the cores (`way`). The worker writes them into run.json (`RunRecord.mode_traits`)
and into the trace's run facts, so a view, an analysis or `compare` asks the trait of the run it
reads, never its mode's name: a new mode is seen by all of them as what it declares.

Where a run says nothing of them (a folder from before they were written, a sweep cell), the traits
come from the table here by the mode's name: `LEGACY`, the four modes as older folders ran them,
and every mode the run engine's registry loaded in this process (`register`, called by
`profiling/run/modes` at import: the trace engine never imports the run engine). A name neither
knows has `UNKNOWN`'s traits: no pool, nothing measured, not the baseline.

Qt-free and torch-free; imports nothing of branchscope (records.py holds these in its records).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

#: The pools a mode runs a region's branches on (`ModeTraits.pool`).
NO_POOL = "none"  # one after another on the main thread
INTEROP_POOL = "interop"  # torch's inter-op pool (TorchScript's fork)
PYTHON_POOL = "python"  # a pool of Python threads
CUDA_STREAMS = "streams"  # one CUDA stream each
#: The pools whose threads run branches side by side (a run of 2 or more of them does).
THREAD_POOLS = (INTEROP_POOL, PYTHON_POOL)
#: How the views name the inter-op threads' group, by the pool the mode runs its branches on (torch's
#: inter-op pool where the mode runs none of its own).
POOL_TITLES = {PYTHON_POOL: "Python pool"}
INTEROP_POOL_TITLE = "inter-op pool"


class ModeTraits(msgspec.Struct, frozen=True, kw_only=True):
    """One mode's traits (see the module docstring), as run.json's `mode_traits` holds them."""

    #: NO_POOL, INTEROP_POOL, PYTHON_POOL or CUDA_STREAMS (another value reads as no pool of threads).
    pool: str = NO_POOL
    #: Its pool threads measure their wait for the GIL (run.json's `branch_threads`).
    gil_measured: bool = False
    #: Speedups are measured against it (its 1×1 run is the default baseline).
    baseline: bool = False
    #: How sentences name it ("multi-stream needs CUDA").
    title: str = ""
    #: How a speedup's parts name its plan on one thread ("TorchScript's plan").
    plan_title: str = "its plan"
    #: How a run of it reads in the runs list after "N branches" (`{interop}` and `{s}` filled in:
    #: `runs_text`).
    runs_as: str = ""
    #: How the advice names its way of using the cores ("forking its branches"); "" for a mode that
    #: runs no branches side by side.
    way: str = ""

    @property
    def branch_pool(self) -> bool:
        """It runs a region's branches side by side on a pool of threads (fork, threads)."""
        return self.pool in THREAD_POOLS

    def side_by_side(self, interop: int | None) -> bool:
        """A run of it on `interop` inter-op threads runs branches side by side: a branch pool on 2 or
        more threads (on one, the pool runs them one after another)."""
        return self.branch_pool and (interop or 0) >= 2

    def threads(self, interop: int, intra: int) -> int:
        """The most threads a run of it I×J computes with at once: J where it runs no pool (its
        inter-op pool stays idle), I×J otherwise."""
        return intra if self.pool == NO_POOL else interop * intra

    def oversubscribes(self, interop: int, intra: int, cores: int | None) -> bool:
        """A run of it I×J computes with more threads than `cores` (`threads`): sequential 2×2 on 2
        cores does not (2 threads), fork 2×2 does (4); never when the cores are unknown."""
        return cores is not None and self.threads(interop, intra) > cores

    @property
    def pool_title(self) -> str:
        """How the views name its run's inter-op threads ("Python pool", else "inter-op pool")."""
        return POOL_TITLES.get(self.pool, INTEROP_POOL_TITLE)

    def runs_text(self, interop: int) -> str:
        """`runs_as` with the inter-op threads filled in ("on 2 Python threads")."""
        return self.runs_as.format(interop=interop, s="s" if interop != 1 else "")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def threads_words(traits: ModeTraits, interop: int, intra: int, cores: int | None) -> tuple[str, bool]:
    """What a run of a mode with `traits` on `interop` × `intra` threads computes with, on `cores`
    cores, and whether that oversubscribes them (`ModeTraits.threads`): a mode without a pool
    computes with its intra-op threads alone, its inter-op threads idle ("2 intra-op threads on
    2 cores (inter-op 2 unused: sequential runs no pool)"); a mode with one with each pool thread's
    intra-op threads ("2 inter-op pool threads × 2 intra-op = 4 threads on 2 cores —
    oversubscribed"). Said under the run controls' sliders and in the details panel's Threads row;
    without `cores` (a run that did not record them) it names no cores."""
    n = traits.threads(interop, intra)
    over = traits.oversubscribes(interop, intra, cores)
    on = "" if cores is None else f" on {_n(cores, 'core')}" + (" — oversubscribed" if over else "")
    if traits.pool == NO_POOL:
        idle = f" (inter-op {interop} unused: {traits.title or 'this mode'} runs no pool)"
        return f"{_n(intra, 'intra-op thread')}{on}{idle}", over
    pool = _n(interop, f"{traits.pool_title} thread") if traits.branch_pool else f"{interop} inter-op"
    return f"{pool} × {intra} intra-op = {_n(n, 'thread')}{on}", over


#: A mode whose traits nothing says.
UNKNOWN = ModeTraits()

#: The modes as runs from before run.json held their traits ran them (what they wrote then).
LEGACY: dict[str, ModeTraits] = {
    "sequential": ModeTraits(baseline=True, title="sequential", plan_title="the model's own forward",
                             runs_as="one after another on the main thread"),
    "fork": ModeTraits(pool=INTEROP_POOL, title="fork", plan_title="TorchScript's plan",
                       runs_as="on {interop} inter-op thread{s}", way="forking its branches"),
    "threads": ModeTraits(pool=PYTHON_POOL, gil_measured=True, title="threads", plan_title="the threads plan",
                          runs_as="on {interop} Python thread{s}", way="running its branches on Python threads"),
    "streams": ModeTraits(pool=CUDA_STREAMS, title="multi-stream", plan_title="the streams plan",
                          runs_as="on one CUDA stream each"),
}  # fmt: skip

_known: dict[str, ModeTraits] = dict(LEGACY)


def register(name: str, traits: ModeTraits) -> None:
    """Makes `name`'s traits known to this process's readers (the run engine's registry calls it for
    each mode it loads); a mode declared as the baseline becomes `baseline_mode`."""
    _known[name] = traits


def traits_of(mode: str | None, recorded: ModeTraits | None = None) -> ModeTraits:
    """A run's traits: what it recorded, else the table's for its mode's name, else UNKNOWN."""
    if recorded is not None:
        return recorded
    return _known.get(mode, UNKNOWN) if mode is not None else UNKNOWN


class RunOfAMode(Protocol):
    """A record of a run: `records.RunRecord` (run.json), `run_info.RunInfo` (the trace's run facts)."""

    @property
    def mode(self) -> str | None: ...

    @property
    def mode_traits(self) -> ModeTraits | None: ...


def run_traits(run: RunOfAMode | None) -> ModeTraits:
    """The traits of the run a record says (see `traits_of`); UNKNOWN for None."""
    if run is None:
        return UNKNOWN
    return traits_of(run.mode, run.mode_traits)


class KnowsItsTraits:
    """Mixed into a run's row (`compare.RunSummary`, `advice.Measured`), which holds its `mode` and
    the `mode_traits` its run recorded: `traits` is the run's, else the table's."""

    mode: str | None
    mode_traits: ModeTraits | None

    @property
    def traits(self) -> ModeTraits:
        return traits_of(self.mode, self.mode_traits)


def baseline_mode() -> str:
    """The name of the mode speedups are measured against (the last registered that says it is)."""
    return next(name for name, t in reversed(_known.items()) if t.baseline)
