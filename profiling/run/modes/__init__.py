"""The execution modes, in a registry: one file per mode, one line per mode in `_MODULES`.

A `Mode` says what the run engine needs to know about it: its name and label (the command line, the
run controls, the sweep panel), what it needs to run (CUDA, TorchScript, the model's branches),
whether the worker starts a pool for it before the model loads (`start_pool`, so the thread census
can tell the pool's threads), what it needs of the worker's torch (`check`: fork needs TorchScript;
the probe of the worker's Python asks every mode's before any run, `unavailable_here`, and the
controls, the sweep and `speedup` offer `instead` in its place),
whether the profiler must record every thread (threads mode's branches run on Python threads, which
torch.profiler does not follow by itself), and how its plan is built (`build_plan`, which imports
torch when it is called: in the worker only). What every reader needs to know of it (the pool it
runs branches on, whether the GIL is measured, whether it is the baseline, its words) are its
`traits` (`profiling/trace/mode_traits.ModeTraits`): the worker writes them into run.json and the
trace, and the registry makes them known to this process's readers (`mode_traits.register`), so
no view, analysis or command asks for a mode by its name.

Adding a mode: a file defining `MODE = Mode(...)` and its plan builder, then one of

- its name in `_MODULES` (a file of this package);
- its file's path, or its module's name, in the environment variable BRANCHSCOPE_MODES (several
  separated by os.pathsep), in the environment branchscope starts in: the runner passes its
  environment on to the worker, whose `python -I` keeps it (it drops only PYTHON* variables, so a
  module must be importable without PYTHONPATH; a file's path always is). The file imports `Mode`
  and whatever it reuses from this package, like the files here (`tests/fixtures/modes/`).

(No entry-point group: reading the installed packages' metadata would cost every process that
imports the registry, the worker included, some 50 ms.)

Nothing else lists the modes. Importing this package imports no torch and no Qt: the window and the
CLI read the registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from branchscope.profiling.run.user_files import ModeFileError, exec_file
from branchscope.profiling.trace import mode_traits
from branchscope.profiling.trace.mode_traits import ModeTraits
from branchscope.profiling.trace.records import MODE_NAME

#: The modes, in the order the controls list them (each a module of this package defining MODE).
_MODULES = ("sequential", "fork", "threads", "streams")
#: More modes, by file path or module name (see the module docstring).
MODES_ENV = "BRANCHSCOPE_MODES"


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
    #: How the controls and the sweep panel list it.
    label: str
    #: One line: what it does, for tooltips and --help.
    description: str
    #: The plan: `build_plan(model, analysis, device) -> Plan` (imports torch: worker only); a mode
    #: with a pool also takes `one_at_a_time=True`: each branch waited for as soon as it is launched
    #: (its plan on one pool thread, for a speedup's parts: `run/paired.py`).
    build_plan: Callable[..., Any]
    #: What every reader needs to know of it, as data (written into run.json and the trace).
    traits: ModeTraits
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
    #: Other names the command line takes for it ("multi-stream").
    aliases: tuple[str, ...] = ()
    #: `settle()`: waits until the mode's pool has finished its tasks. The worker calls it after each
    #: profiled step, before it drops the step's output, so that the main thread (which the profiler
    #: follows) holds the output's last reference: fork's pool threads drop theirs after the task,
    #: where torch.profiler records no free (see `fork.settle`). None: nothing to wait for.
    settle: Callable[[], Any] | None = None
    #: The mode that runs the same branches another way, offered in its place where `check` says
    #: it cannot run (fork: threads); None: none.
    instead: str | None = None

    @property
    def starts_interop_pool(self) -> bool:
        """The worker starts the mode's inter-op pool before loading the model."""
        return self.start_pool is not None


def _registered() -> list[tuple[str, ModuleType]]:
    """The modules MODES_ENV names, each with its entry: a path (ending in .py, or holding a
    separator) or a module name. Paths are made absolute in this process's environment, which the
    worker inherits in another working folder. One that cannot be imported is a `ModeFileError`
    naming it and why."""
    entries = [e for e in os.environ.get(MODES_ENV, "").split(os.pathsep) if e]
    entries = [os.path.abspath(e) if e.endswith(".py") or os.sep in e else e for e in entries]
    if entries:
        os.environ[MODES_ENV] = os.pathsep.join(entries)
    modules = []
    for entry in entries:
        try:
            path = Path(entry)
            modules.append((entry, exec_file(path, f"branchscope_mode_{path.stem}") if path.is_absolute() else import_module(entry)))
        except Exception as exc:  # the user's file: whatever it raises is said, not a traceback
            raise ModeFileError(f"{MODES_ENV}: {entry} cannot be imported: {type(exc).__name__}: {exc}") from exc
    return modules


def _load() -> dict[str, Mode]:
    modes: dict[str, Mode] = {}
    for name in _MODULES:
        mode = import_module(f"{__name__}.{name}").MODE
        assert isinstance(mode, Mode) and mode.name == name, f"{name}.py must define MODE = Mode(name={name!r}, …)"
        modes[name] = mode
    for entry, module in _registered():
        mode = getattr(module, "MODE", None)
        if not isinstance(mode, Mode) or mode.name in modes or not MODE_NAME.fullmatch(mode.name):
            raise ModeFileError(
                f"{MODES_ENV}: {entry} must define MODE = Mode(name=…) with a name of its own, "
                f"in lower case letters, digits and _"
            )
        modes[mode.name] = mode
    for mode in modes.values():
        mode_traits.register(mode.name, mode.traits)
    return modes


#: Every mode by name, in `_MODULES` order, then those registered from outside.
MODES: dict[str, Mode] = _load()
#: Their names (what run.json and sweep.json write).
MODE_NAMES: tuple[str, ...] = tuple(MODES)
_baselines = [name for name, m in MODES.items() if m.traits.baseline]
assert len(_baselines) == 1, "speedups are measured against one baseline mode: exactly one must say it is"
#: The mode speedups are measured against (the one whose traits say `baseline`): the first run's.
BASELINE_MODE: str = _baselines[0]


def mode_named(name: str) -> Mode:
    """The mode called `name` or one of its aliases; KeyError (naming the modes) otherwise."""
    if name in MODES:
        return MODES[name]
    for mode in MODES.values():
        if name in mode.aliases:
            return mode
    raise KeyError(f"{name!r} is not one of: {', '.join(MODE_NAMES)}")


def why_not_offered(mode: Mode, cuda: tuple[bool, str], problems: Mapping[str, str]) -> str:
    """Why `mode` cannot be chosen in the window ("" when it can): it needs CUDA, which `cuda`
    (available, why not) says this machine lacks, or the worker's Python cannot run it (`problems`,
    that Python's probe's answer: `unavailable_here` there). The run controls and the Sweep tab alike."""
    if mode.needs_cuda and not cuda[0]:
        return f"{mode.traits.title} needs CUDA: {cuda[1]}"
    return problems.get(mode.name, "")


def unavailable_here() -> dict[str, str]:
    """Why each mode whose `check` refuses this process's torch cannot run here, {name: its line};
    the modes that can are not in it. Imports torch: `interpreter.PROBE` calls it in the worker's
    Python, so that the window and a sweep know before any run (`interpreter.modes_unavailable`)."""
    problems = {}
    for mode in MODES.values():
        if mode.check is None:
            continue
        try:
            why = mode.check()
        except Exception as exc:  # noqa: BLE001 - a mode's check that raises cannot say it can run
            first = (str(exc).strip().splitlines() or [""])[0]  # one line: it goes in sweep.json and tooltips
            why = f"{mode.traits.title}: its check raised {type(exc).__name__}: {first}"[:300]
        if why:
            problems[mode.name] = why
    return problems


def command_line_names() -> list[str]:
    """Every name the command line takes: the modes' names, then their aliases."""
    return [*MODE_NAMES, *(a for m in MODES.values() for a in m.aliases)]
