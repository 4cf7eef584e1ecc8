"""When a run's step times were measured starved of cores, so that no way of using the cores may be
called the winner from them.

On a busy machine a run can get far fewer cores than its threads could use: a threads 2×1 run that
got 0.36 of a core, beside a sequential 1×2 run that got two, is a measure of the machine's load,
not of the model. The advice (`advice.py`) never names such a run the winner or the loser; run.json,
sweep.json's cells and `compare`'s rows say `"starved": true`.

**Threads of a run** (`threads`): the most threads that compute at once, per rank, times the ranks.
- a mode with no pool (its traits' `pool`: sequential) I×J: J. The model runs on the main thread
  with its intra-op team of J threads (the main thread one of them); it hands nothing to the
  inter-op pool, so I does not count (`mode_traits.ModeTraits.threads`).
- any other mode I×J (fork, threads): I×J, up to I branches at once on the pool, each op with J
  intra-op threads. This is the count a sweep's cell is "oversubscribed" by (I×J > cores).

**Starved** (`is_starved`): the cores its threads could use are min(threads, usable cores). The run
is starved when it got, or was left, less than `STARVED_SHARE` (0.8) of them:
- got: the cores it used on average (`cores_used`: its CPU time over the seconds measured, the
  runner's `machine_load.LoadMeter`) < 0.8 × the cores it wanted: min(threads, cores, what it used
  plus what its threads waited for a core, runnable, `wait_cores`: their schedstat run delay over the
  same seconds). A model whose threads idle (a fork 2×1 run with long serial parts uses 1.3 cores on
  a quiet machine) wanted no more than it got and is not starved; its threads waiting for a core
  are what starves a run. Where the wait was not measured, "got" is not judged;
- left: the usable cores less those other processes used (run.json's `load.others_cores`)
  < 0.8 × min(threads, cores), i.e. others' cores > cores − 0.8 × min(threads, cores). The same
  share as "got", so that the few hundredths of a core a quiet machine's daemons use never starve a
  run of as many threads as cores, and a run oversubscribed by its own choice (threads > cores)
  is judged on the cores it could have had.
Unknown figures are not held against a run: with neither known, whether it was starved is unknown
(None).

Qt-free and torch-free: the runner (run.json), the sweep (its cells), `compare` (its rows).
"""

from __future__ import annotations

from branchscope.profiling.trace.mode_traits import traits_of
from branchscope.profiling.trace.records import LoadRecord

#: A run is starved when it got, or was left, less than this share of the cores its threads could use.
STARVED_SHARE = 0.8
#: What `profile`'s summary says of a starved run (run.json's `starved`).
STARVED_LINE = (
    "starved of cores: the run got, or was left, fewer cores than its threads could use, so its times name no "
    "winner; branchscope speedup measures configurations paired and interleaved"
)
#: A figure at the bound exactly is not below it (4 − 2.4 < 0.8 × 4 in floating point).
_ROUNDING = 1e-9


def threads(mode: str, interop: int, intra: int) -> int:
    """The most threads a run of `mode` I×J computes with at once (see the module docstring): its
    traits' `threads`."""
    return traits_of(mode).threads(interop, intra)


def run_threads(mode: str | None, interop: int | None, intra: int | None, ranks: int | None = 1) -> int | None:
    """`threads` of a run times its ranks on this machine; None when its mode or threads are unknown."""
    if mode is None or interop is None or intra is None or interop < 1 or intra < 1:
        return None
    return threads(mode, interop, intra) * max(1, ranks or 1)


def could_use(threads: int, cores: int | None) -> int:
    """The cores a run's threads could use: min(threads, cores), its threads where the cores are unknown."""
    return max(1, min(threads, cores) if cores is not None and cores >= 1 else threads)


def is_starved(
    threads: int, cores: int | None, cores_used: float | None, others_cores: float | None, wait_cores: float | None = None
) -> bool | None:
    """Whether a run of `threads` on `cores` usable cores got (`cores_used`, of what it wanted:
    `cores_used` + `wait_cores`) or was left (`cores` − `others_cores`) less than `STARVED_SHARE` of
    the cores its threads could use (see the module docstring); None when neither is known."""
    judged_got = cores_used is not None and wait_cores is not None
    if not judged_got and (others_cores is None or cores is None):
        return None
    need = STARVED_SHARE * could_use(threads, cores) - _ROUNDING
    got = False
    if cores_used is not None and wait_cores is not None:
        wanted = min(float(could_use(threads, cores)), cores_used + wait_cores)
        got = cores_used < STARVED_SHARE * wanted - _ROUNDING
    left = others_cores is not None and cores is not None and cores - others_cores < need
    return got or left


def load_starved(
    mode: str | None, interop: int | None, intra: int | None, ranks: int | None, load: LoadRecord | None,
    cores: int | None = None,
) -> bool | None:
    """Whether a run of `mode` I×J on `ranks` processes was starved by what run.json's `load` says
    of it (`is_starved` on its cores, the cores it used and waited for, the cores others used;
    `cores` where the load does not say them): the runner's verdict, and `compare`'s for a run.json
    from before it. None when its threads or the load are unknown."""
    threads = run_threads(mode, interop, intra, ranks)
    if threads is None or load is None or load.others_cores is None:
        return None
    return is_starved(threads, load.cores or cores, load.own_cores, load.others_cores, load.own_wait_cores)
