"""The worker's phases up to a checked plan, named as run.json's "phase_seconds" names them:
`start` (torch's threads, the mode's pool), `load` (the device, a rank's process group, the model),
`forward` (the model's own), `discovery` (its branches), `plan` (the mode's) and `check` (the
plan's outputs against the model's); and `Model`, how those and every later phase call the model
(a model that raises is a `RunFailure` of exit code 2, its traceback the user's).

Imports torch when called (the worker's first torch calls are `start`'s), never at import.
"""

from __future__ import annotations

import argparse
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from branchscope.profiling.run.branch_pool import BranchPool
from branchscope.profiling.run.cpu_sampler import ThreadCensus
from branchscope.profiling.run.folder import FAILURE_FILES
from branchscope.profiling.run.modes import Mode, ModeUnavailable, mode_named
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT as EXIT_BAD_MODEL
from branchscope.profiling.run.protocol import EXIT_MODE, RunFailure


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed run (torch.distributed.run's RANK, LOCAL_RANK, WORLD_SIZE)."""

    rank: int
    local_rank: int
    world_size: int


class Phases:
    """Seconds of each phase of a run, in the order they ran (run.json's "phase_seconds"): `end(NAME)`
    ends the phase that began where the previous one ended (or where this was made); a phase ended
    twice adds up."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._since = clock()

    def end(self, name: str) -> None:
        now = self.clock()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._since, 4)
        self._since = now


@dataclass
class Started:
    """What `start` set up: torch (imported), the mode, the main thread's id, which thread is which
    (`ThreadCensus`) and threads mode's own pool, which measures the branches its threads run (see
    branch_pool; torch's cannot)."""

    torch: Any
    mode: Mode
    main_tid: int
    census: ThreadCensus
    pool: BranchPool | None


def start(args: argparse.Namespace) -> Started:
    """The "start" phase: the process's first torch calls (the inter-op pool size can be set only
    before it starts), the mode's check, the main thread's OpenMP team and the mode's pool."""
    import torch

    torch.set_num_interop_threads(args.interop)
    torch.set_num_threads(args.intra)
    main_tid = threading.get_native_id()

    from branchscope.profiling.run.plans import start_intra_op_team

    # Which thread is which, taken as torch starts them (see ThreadCensus): the threads there now
    # (torch's pthreadpool among them) are other threads; then the main thread's OpenMP team; then,
    # where the plan forks, the inter-op pool, started by a fork that does no OpenMP work.
    mode = mode_named(args.mode)
    if mode.check is not None and (why := mode.check()):
        raise RunFailure(EXIT_MODE, why)
    census = ThreadCensus(main_tid, args.interop)
    start_intra_op_team(args.intra)
    census.note("intra")
    pool: BranchPool | None = None
    if mode.start_pool is not None:
        started = mode.start_pool(args.interop)
        pool = started if isinstance(started, BranchPool) else None
        census.note("interop")
    return Started(torch, mode, main_tid, census, pool)


@dataclass
class Model:
    """The loaded model (`model_source.LoadedModel`) on its device, a rank's process group backend,
    and how every phase calls it: the model's file (for the user's traceback), whether it runs on
    CUDA and the devices a step waits for (`sync`)."""

    torch: Any
    loaded: Any
    device: str
    backend: str | None
    user_file: Path
    is_cuda: bool
    #: The chosen device (made current by `resolve_device`), and any other the inputs live on (a
    #: demo needing several GPUs puts them on cuda:0 whatever --device says).
    sync_devices: list[int]

    @property
    def device_label(self) -> str:
        """run.json's "device": "cpu", or "cuda:N (its name)"."""
        return self.device if not self.is_cuda else f"{self.device} ({self.torch.cuda.get_device_name()})"

    def sync(self) -> None:
        for index in self.sync_devices:
            self.torch.cuda.synchronize(index)

    def call(self, fn: Any, what: str) -> Any:
        """`fn` (the model, or a plan) on the model's inputs, without grad; what it raises is the model's error."""
        try:
            with self.torch.no_grad():
                return fn(*self.loaded.inputs, **self.loaded.kwargs)
        except (Exception, SystemExit) as exc:  # sys.exit() in the model is a model error like any other
            raise self._model_error(exc, "the model", what) from (None if isinstance(exc, SystemExit) else exc)

    def train(self, module: Any, what: str) -> None:
        """The file's train_step on `module`, with grad (see LoadedModel.train_step)."""
        try:
            with self.torch.enable_grad():
                self.loaded.train_step(module, self.loaded.example)
        except (Exception, SystemExit) as exc:
            raise self._model_error(exc, "train_step", what) from (None if isinstance(exc, SystemExit) else exc)

    def step(self, plan: Any, what: str) -> Any:
        """One step of the mode's plan: its output (None for a train_step), which the caller drops."""
        if self.loaded.train_step is not None:
            self.train(plan.module, what)
            return None
        return self.call(plan, what)

    def own_step(self) -> None:
        """One step of the model itself (no plan): its forward, or its train_step."""
        if self.loaded.train_step is None:
            self.call(self.loaded.model, "measuring its branches for the prediction")
            return
        with self.torch.enable_grad():
            self.loaded.train_step(self.loaded.model, self.loaded.example)

    def _model_error(self, exc: BaseException, who: str, what: str) -> RunFailure:
        from branchscope.profiling.run.model_source import import_hint, user_traceback

        tb = user_traceback(exc, self.user_file) if self.user_file.suffix == ".py" else traceback.format_exc()
        if isinstance(exc, SystemExit):
            return RunFailure(EXIT_BAD_MODEL, f"{who} called sys.exit({exc.code!r}) while {what}", tb)
        first = (str(exc).strip().splitlines() or [""])[0]
        hint = import_hint(exc, self.user_file)  # a module not found: where the worker's isolation explains it
        return RunFailure(EXIT_BAD_MODEL, f"{who} raised {type(exc).__name__} while {what}: {first}{hint}", tb)


def load(args: argparse.Namespace, started: Started, dist: RankInfo | None) -> Model:
    """The "load" phase: the device (a rank r on cuda:(local rank)), a rank's process group (before
    the model is built, so that a model file may use torch.distributed freely), and the model."""
    torch, mode = started.torch, started.mode
    if dist is None:
        device = resolve_device(torch, args.device)
    elif args.device == "cpu" or (args.device == "auto" and not torch.cuda.is_available()):
        device = "cpu"
    else:
        device = resolve_device(torch, f"cuda:{dist.local_rank}")
    if mode.needs_cuda and not device.startswith("cuda"):
        raise RunFailure(EXIT_MODE, f"{mode.traits.title} needs CUDA: this machine has no CUDA device torch can use")
    backend = None
    if dist is not None:
        backend = "nccl" if device.startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend=backend)

    loaded = load_requested_model(args, device)
    started.census.note(main_named_are_intra=False)  # CUDA starts its threads here, named like the main thread

    from branchscope.profiling.run.model_source import demo_info

    user_file = demo_info(args.demo).path if args.demo else Path(args.model)
    is_cuda = device.startswith("cuda") or any(t.is_cuda for t in loaded.tensors())
    sync_devices = (
        sorted({torch.cuda.current_device()} | {t.device.index for t in loaded.tensors() if t.is_cuda})
        if is_cuda
        else []
    )
    return Model(torch, loaded, device, backend, user_file, is_cuda, sync_devices)


@dataclass(frozen=True)
class Planned:
    """What the phases from "forward" to "check" made: the branches found (`branches.find_branches`),
    the mode's plan, and the largest absolute difference of its outputs from the model's own."""

    analysis: Any
    plan: Any
    max_abs_diff: float


def resolve_device(torch: Any, requested: str) -> str:
    """"cpu" or "cuda:N" (made the current CUDA device, so synchronize() and the like use it)."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested != "cuda" and not (requested.startswith("cuda:") and requested[5:].isdigit()):
        raise RunFailure(EXIT_BAD_MODEL, f"--device {requested!r} is not one of: auto, cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise RunFailure(EXIT_MODE, f"--device {requested} needs CUDA, and torch sees no CUDA device here")
    count = torch.cuda.device_count()
    index = int(requested[5:]) if ":" in requested else torch.cuda.current_device()
    if index >= count:
        raise RunFailure(
            EXIT_MODE, f"--device {requested}: torch sees only {count} CUDA device(s) here (cuda:0 to cuda:{count - 1})"
        )
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def load_requested_model(args: argparse.Namespace, device: str) -> Any:
    """The model the worker's arguments name (--demo or --model, a TorchScript archive's input
    shapes and dtype) on `device`, as a `model_source.LoadedModel`; what fails is a RunFailure
    (a demo this machine cannot run: exit 3; a bad model or its code raising: 2). Imports torch."""
    from branchscope.profiling.run.model_source import (
        DemoUnavailableError,
        ModelCodeError,
        ModelSourceError,
        ModelSpec,
        load_model,
        parse_input_shape,
    )

    try:
        spec = ModelSpec(
            demo=args.demo,
            path=args.model,
            input_shapes=tuple(parse_input_shape(s) for s in args.input_shapes),
            dtype=args.dtype,
        )
        return load_model(spec, device)
    except DemoUnavailableError as exc:
        raise RunFailure(EXIT_MODE, str(exc)) from exc
    except ModelSourceError as exc:
        raise RunFailure(EXIT_BAD_MODEL, str(exc)) from exc
    except ModelCodeError as exc:
        raise RunFailure(EXIT_BAD_MODEL, str(exc), exc.model_traceback) from exc


def forward(model: Model) -> Any:
    """The "forward" phase: the model's own forward first, so that a model that raises is a model
    error in every mode, before branch discovery or a plan could fail on it for another reason."""
    return model.call(model.loaded.model, "running its forward")


def discovery(model: Model) -> Any:
    """The "discovery" phase: the model's branches (`branches.find_branches`)."""
    from branchscope.profiling.run.branches import find_branches

    loaded = model.loaded
    return find_branches(loaded.model, loaded.inputs, loaded.kwargs, grad=loaded.train_step is not None)


def plan(args: argparse.Namespace, mode: Mode, model: Model, analysis: Any) -> Any:
    """The "plan" phase: the mode's plan of the branches, its source kept as OUT/plan.py. A mode
    that cannot run the model is a RunFailure of exit code 3, its files kept for OUT/failed-run/."""
    try:
        made = mode.build_plan(model.loaded.model, analysis, model.device)
    except ModeUnavailable as exc:
        for name, text in exc.files.items():  # the runner keeps them in OUT/failed-run/
            if name in FAILURE_FILES:
                (args.out / name).write_text(text, encoding="utf-8")
        raise RunFailure(EXIT_MODE, str(exc)) from exc
    if made.source:
        (args.out / "plan.py").write_text(made.source, encoding="utf-8")
    return made


def check(args: argparse.Namespace, model: Model, made: Any, expected: Any) -> float:
    """The "check" phase: the plan's outputs against the model's own (`expected`), as the largest
    absolute difference."""
    from branchscope.profiling.run.plans import max_abs_diff

    actual = model.call(made, f"running the {args.mode} plan")
    model.sync()
    return max_abs_diff(expected, actual)
