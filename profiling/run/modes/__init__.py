"""The execution modes, in a registry: one file per mode, one line per mode in `_MODULES`.

A `Mode` says what every part of branchscope needs to know about it: its name and label (the
command line, the run controls, the sweep panel, the legend and summary lines), what it needs to
run (CUDA, TorchScript, the model's branches), whether the worker starts torch's inter-op pool for
it before the model loads (`start_pool`, so the thread census can tell the pool's threads), what it
needs of the worker's torch (`check`: fork needs TorchScript), whether the profiler must record every
thread (threads mode's branches run on Python threads, which torch.profiler does not follow by
itself), how the runs list says what ran ("4 branches on 2 inter-op threads"), and how its plan is
built (`build_plan`, which imports torch when it is called: in the worker only).

Adding a mode: a file here defining `MODE = Mode(...)` and its plan builder, plus its name in
`_MODULES`. Nothing else lists the modes.

Importing this package imports no torch and no Qt: the window and the CLI read the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from branchscope.profiling.trace.records import BASELINE_MODE

#: The modes, in the order the controls list them (each a module of this package defining MODE).
_MODULES = ("sequential", "fork", "threads", "streams")


class ModeUnavailable(Exception):
    """The mode cannot run this model here (no branches, no CUDA, TorchScript cannot compile the
    plan, …); the message says why in one line. `files`: what a user needs to see why, by the name the
    run keeps it under (the plan that failed to compile as "plan.py", the compiler's whole message as
    "plan-error.txt"): the worker writes them into the run's folder, and the runner keeps them in
    OUT/failed-run/ (see `folder.RunFolder.keep_failure`)."""

    def __init__(self, message: str, files: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.files = dict(files or {})


class HigherOrderUnavailable(ModeUnavailable):
    """The mode's plan cannot call a higher-order op the graph holds (`op`: "cond"; TorchScript calls
    none), though the model has branches: a mode whose plan is eager Python can run it."""

    def __init__(self, message: str, op: str) -> None:
        super().__init__(message)
        self.op = op


@dataclass(frozen=True)
class Mode:
    """One execution mode (see the module docstring)."""

    name: str
    #: How sentences name it ("multi-stream needs CUDA").
    title: str
    #: How the controls and the sweep panel list it.
    label: str
    #: One line: what it does, for tooltips and --help.
    description: str
    #: How a run of it reads in the runs list, after "N branches": `{interop}` and `{s}` (the plural
    #: of "thread") are filled in, e.g. "on {interop} inter-op thread{s}".
    runs_as: str
    #: The plan: `build_plan(model, analysis, device) -> Plan` (imports torch: worker only); a mode
    #: with a pool also takes `one_at_a_time=True`: each branch waited for as soon as it is launched
    #: (its plan on one pool thread, for a speedup's parts: `run/paired.py`).
    build_plan: Callable[..., Any]
    needs_cuda: bool = False
    needs_torchscript: bool = False
    #: Needs the model's graph and parallel branches (only sequential runs any model as it is).
    needs_branches: bool = True
    #: `start_pool(threads)`: starts the mode's inter-op pool in the worker before the model loads,
    #: so the thread census counts its threads apart (they are run.json's `interop_tids`), and gives
    #: the pool where it is branchscope's own (threads mode's `branch_pool.BranchPool`, whose threads
    #: measure the branches they run), else None; None: the mode has no pool. Imports torch when called.
    start_pool: Callable[[int], Any] | None = None
    #: `check()`: why this mode cannot run with the worker's torch, in one line (the run exits 3 with
    #: it before anything starts), or None. Imports torch when called.
    check: Callable[[], str | None] | None = None
    #: Its branches run on threads torch.profiler does not follow by itself (Python threads): the
    #: worker profiles every thread.
    profile_all_threads: bool = False
    #: What running its plan on one thread is, in a speedup's parts ("1.40× from TorchScript's
    #: plan"): for a mode that runs the branches one after another at 1×J, what its plan changes
    #: against the model's own forward.
    plan_title: str = "its plan"
    #: Other names the command line takes for it ("multi-stream").
    aliases: tuple[str, ...] = ()
    #: `settle()`: waits until the mode's pool has finished its tasks. The worker calls it after each
    #: profiled step, before it drops the step's output, so that the main thread (which the profiler
    #: follows) holds the output's last reference: fork's pool threads drop theirs after the task,
    #: where torch.profiler records no free (see `fork.settle`). None: nothing to wait for.
    settle: Callable[[], Any] | None = None

    @property
    def starts_interop_pool(self) -> bool:
        """The worker starts the mode's inter-op pool before loading the model."""
        return self.start_pool is not None

    def runs_text(self, interop: int) -> str:
        """`runs_as` with the inter-op threads filled in."""
        return self.runs_as.format(interop=interop, s="s" if interop != 1 else "")


def _load() -> dict[str, Mode]:
    modes: dict[str, Mode] = {}
    for name in _MODULES:
        mode = import_module(f"{__name__}.{name}").MODE
        assert isinstance(mode, Mode) and mode.name == name, f"{name}.py must define MODE = Mode(name={name!r}, …)"
        modes[name] = mode
    return modes


#: Every mode by name, in `_MODULES` order.
MODES: dict[str, Mode] = _load()
#: Their names (what run.json and sweep.json write).
MODE_NAMES: tuple[str, ...] = tuple(MODES)
assert BASELINE_MODE in MODES, "speedups are measured against the baseline mode: it must be registered"


def mode_named(name: str) -> Mode:
    """The mode called `name` or one of its aliases; KeyError (naming the modes) otherwise."""
    if name in MODES:
        return MODES[name]
    for mode in MODES.values():
        if name in mode.aliases:
            return mode
    raise KeyError(f"{name!r} is not one of: {', '.join(MODE_NAMES)}")


def command_line_names() -> list[str]:
    """Every name the command line takes: the modes' names, then their aliases."""
    return [*MODE_NAMES, *(a for m in MODES.values() for a in m.aliases)]
