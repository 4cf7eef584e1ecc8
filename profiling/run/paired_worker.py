"""The paired worker: several configurations of one model timed in alternation in one process.

`python -I -m branchscope.profiling.run.paired_worker RUN-ARGS --configs M:IxJ,… --rounds N`,
started and supervised by the runner as the profiling worker is (`runner.run_profile(layout=…)`,
see `run/paired.py`): it dies with the runner, leads its own group with a reaper, joins the run's
cgroup (`worker_process.die_with_parent`), speaks the same JSON lines on its original stdout and writes
`records.PAIRED_TIMES_JSON` into its staging folder, then `finished`.

Why one process can hold several configurations: the inter-op pool is sized once per process
(`torch.set_num_interop_threads`, before any inter-op work), the intra-op threads of the main
thread can change between steps (`torch.set_num_threads`). A pool's threads read the intra-op count
once, when they start (torch's inter-op pool) or at their first parallel op (threads mode's Python
pool): so the configurations that use a pool (fork, threads) must agree on both counts, and the
worker sets the intra-op count to theirs before starting the pools; sequential configurations (no
pool) may take any intra-op count. `run/paired.share_one_worker` decides, the orchestrator sends
the others each to a worker of their own.

A one-at-a-time configuration (`M:1xJ/one-at-a-time`, the parts of a speedup: `run/paired.py`) runs
mode M's plan with each branch waited for as soon as it is launched (`build_plan(one_at_a_time=True)`)
on the pool started for the worker's M I×J: M's plan on one thread, beside M I×J in one process.

Steps: load the model once, run its forward (the reference outputs), find its branches once (when a
configuration needs them), build each mode's plan once (sequential times the model's plain forward:
its plan would add forward hooks to the model, which every plan then runs too), check each plan's
outputs against the model's, warm each configuration up (`steady.warm_up`, capped at
`WARMUP_CAP_S` each), then N rounds of one step of each configuration, no profiler. The order of the
configurations turns round every other round (A B, B A, A B…): under a load that rises steadily,
always running A first would make every pair favour A by the same small amount.

torch is imported only inside `measure`, in the worker process.
"""

from __future__ import annotations

import argparse
import faulthandler
import statistics
import sys
import time
import traceback
from typing import Any, NamedTuple, NoReturn

from branchscope.profiling.machine import usable_cores
from branchscope.profiling.run.model_setup import load_requested_model, resolve_device
from branchscope.profiling.run.modes import Mode, ModeUnavailable, mode_named
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, EXIT_MODE, RunFailure, add_run_arguments
from branchscope.profiling.run.steady import warm_up
from branchscope.profiling.run.worker import _Protocol, _run_and_exit
from branchscope.profiling.run.worker_process import die_with_parent
from branchscope.profiling.trace.events import PhaseEvent, ProgressEvent
from branchscope.profiling.trace.sweep_records import PAIRED_TIMES_JSON, PairedConfigRecord, PairedTimesRecord

PAIRED_WORKER_MODULE = "branchscope.profiling.run.paired_worker"
#: Seconds of warm-up each configuration may take at most (the settle rule usually stops sooner).
WARMUP_CAP_S = 5.0


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {PAIRED_WORKER_MODULE}", description="Configurations timed in alternation.")
    add_run_arguments(p, worker=True)  # --mode/--interop/--intra: the pool's counts (see run/paired.py)
    p.add_argument("--configs", required=True, help="MODE:IxJ,… (checked by the orchestrator)")
    p.add_argument("--rounds", type=int, required=True, help="rounds of one step of each configuration")
    return p


class WorkerConfig(NamedTuple):
    """One configuration as the worker steps it; `one_at_a_time`: the mode's plan with each branch
    waited for as soon as it is launched, on the pool the worker started for another configuration."""

    mode: str
    interop: int
    intra: int
    one_at_a_time: bool = False


#: How the orchestrator marks a one-at-a-time configuration (`paired.PairedConfig.argv`).
ONE_AT_A_TIME = "/one-at-a-time"


def parse_config_list(text: str) -> list[WorkerConfig]:
    """`MODE:IxJ[/one-at-a-time],…` as the orchestrator writes it (already checked there)."""
    configs = []
    for part in text.split(","):
        one = part.endswith(ONE_AT_A_TIME)
        mode, _, threads = part.removesuffix(ONE_AT_A_TIME).partition(":")
        interop, _, intra = threads.partition("x")
        configs.append(WorkerConfig(mode, int(interop), int(intra), one))
    return configs


def round_order(count: int, round_index: int) -> list[int]:
    """The configurations' order in round `round_index`: forward in even rounds, reversed in odd ones."""
    order = list(range(count))
    return order if round_index % 2 == 0 else order[::-1]


def measure(args: argparse.Namespace, proto: _Protocol) -> PairedTimesRecord:
    """The paired worker's run (see the module docstring): the pools, the model and its plans once,
    then the configurations warmed up and timed in alternating rounds."""
    import torch

    configs = parse_config_list(args.configs)
    modes = [mode_named(c.mode) for c in configs]
    _start_pools(torch, args, configs, modes)
    proto.emit(PhaseEvent(phase="load"))
    model = _Model.load(torch, args, modes)
    plans, diffs = _plans(model, configs, modes)
    times, order = _rounds(model, args, configs, plans, proto)
    prediction = _prediction(model.loaded, model.analysis, configs, model.call, model.sync) if model.analysis is not None else None
    return _times_record(model, configs, times, order, diffs, prediction)


def _start_pools(torch: Any, args: argparse.Namespace, configs: list[WorkerConfig], modes: list[Mode]) -> None:
    """First torch calls of the process: the inter-op pool's size, then the intra-op count its
    threads will read when they start (the pool-using configurations agree on both); each mode
    checked, its pool started."""
    pooled = [(c.interop, c.intra) for c, mode in zip(configs, modes, strict=True) if mode.start_pool is not None]
    torch.set_num_interop_threads(args.interop)
    torch.set_num_threads(pooled[0][1] if pooled else args.intra)
    for mode in dict.fromkeys(modes):
        if mode.check is not None and (why := mode.check()):
            raise RunFailure(EXIT_MODE, why)
        if mode.start_pool is not None:
            mode.start_pool(args.interop)


class _Model:
    """The model loaded once on its device, its branches when a mode needs them, and how a step of
    it (or of a plan) is called and waited for."""

    def __init__(self, torch: Any, loaded: Any, device: str, analysis: Any) -> None:
        self.torch, self.loaded, self.device, self.analysis = torch, loaded, device, analysis
        self.is_cuda = device.startswith("cuda") or any(t.is_cuda for t in loaded.tensors())

    @classmethod
    def load(cls, torch: Any, args: argparse.Namespace, modes: list[Mode]) -> _Model:
        device = resolve_device(torch, args.device)
        for mode in modes:
            if mode.needs_cuda and not device.startswith("cuda"):
                raise RunFailure(EXIT_MODE, f"{mode.traits.title} needs CUDA: this machine has no CUDA device torch can use")
        return cls(torch, load_requested_model(args, device), device, None)

    def sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize()

    def call(self, fn: Any, what: str) -> Any:
        """One step of `fn` (the model or a plan), or its train step; the model's error as a RunFailure."""
        loaded, torch = self.loaded, self.torch
        try:
            if loaded.train_step is not None:
                module = fn.module if hasattr(fn, "module") else fn
                with torch.enable_grad():
                    return loaded.train_step(module, loaded.example)
            with torch.no_grad():
                return fn(*loaded.inputs, **loaded.kwargs)
        except (Exception, SystemExit) as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise RunFailure(
                EXIT_BAD_INPUT, f"the model raised {type(exc).__name__} while {what}: {first}", traceback.format_exc()
            ) from exc


def _plans(
    model: _Model, configs: list[WorkerConfig], modes: list[Mode]
) -> tuple[dict[tuple[str, bool], Any], dict[tuple[str, bool], float | None]]:
    """Each mode's plan built once, by (mode, one at a time), its branches found first when a mode
    needs them (kept in `model.analysis`); and each plan's outputs against the model's (None in a
    train step)."""
    from branchscope.profiling.run.branches import find_branches
    from branchscope.profiling.run.plans import max_abs_diff

    loaded = model.loaded
    expected = model.call(loaded.model, "running its forward")
    if any(mode.needs_branches for mode in modes):
        model.analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs, grad=loaded.train_step is not None)
    plans: dict[tuple[str, bool], Any] = {}
    for c, mode in zip(configs, modes, strict=True):
        key = (mode.name, c.one_at_a_time)
        if key in plans:
            continue
        if not mode.needs_branches:
            plans[key] = loaded.model  # sequential: the plain forward (see the module docstring)
            continue
        try:
            plans[key] = (
                mode.build_plan(loaded.model, model.analysis, model.device, one_at_a_time=True)
                if c.one_at_a_time
                else mode.build_plan(loaded.model, model.analysis, model.device)
            )
        except ModeUnavailable as exc:
            raise RunFailure(EXIT_MODE, str(exc)) from exc
    diffs: dict[tuple[str, bool], float | None] = {}
    for (name, one), plan in plans.items():
        actual = model.call(plan, f"running the {name} plan" + (" one branch at a time" if one else ""))
        model.sync()
        diffs[(name, one)] = None if loaded.train_step is not None else max_abs_diff(expected, actual)
    return plans, diffs


def _rounds(
    model: _Model, args: argparse.Namespace, configs: list[WorkerConfig], plans: dict[tuple[str, bool], Any], proto: _Protocol
) -> tuple[list[list[float]], list[list[int]]]:
    """Each configuration warmed up, then `args.rounds` rounds of one step of each in alternating
    order (`round_order`): each configuration's step times (ms) and each round's order."""

    def step(index: int, what: str) -> float:
        c = configs[index]
        model.torch.set_num_threads(c.intra)
        t0 = time.perf_counter()
        model.call(plans[(c.mode, c.one_at_a_time)], what)
        model.sync()
        return (time.perf_counter() - t0) * 1000.0

    proto.emit(PhaseEvent(phase="warmup"))
    for index in range(len(configs)):

        def warm(index: int = index) -> None:
            step(index, "warming up")

        warm_up(warm, max(args.warmup, 1), max_s=WARMUP_CAP_S)

    proto.emit(PhaseEvent(phase="timing"))
    times: list[list[float]] = [[] for _ in configs]
    order: list[list[int]] = []
    for r in range(args.rounds):
        this_round = round_order(len(configs), r)
        for index in this_round:
            times[index].append(step(index, f"timing round {r + 1}"))
        order.append(this_round)
        proto.emit(ProgressEvent(step=r + 1, of=args.rounds))
    return times, order


def _times_record(
    model: _Model,
    configs: list[WorkerConfig],
    times: list[list[float]],
    order: list[list[int]],
    diffs: dict[tuple[str, bool], float | None],
    prediction: Any,
) -> PairedTimesRecord:
    return PairedTimesRecord(
        configs=[
            PairedConfigRecord(
                mode=c.mode,
                interop=c.interop,
                intra=c.intra,
                one_at_a_time=c.one_at_a_time,
                median_ms=round(statistics.median(ts), 4),
                steps=len(ts),
                steps_ms=[round(t, 4) for t in ts],
                max_abs_diff=diffs[(c.mode, c.one_at_a_time)],
            )
            for c, ts in zip(configs, times, strict=True)
        ],
        order=order,
        model=model.loaded.label,
        device=model.device,
        torch=str(model.torch.__version__),
        cores=usable_cores(),
        prediction=prediction,
        complete=True,
    )


def _prediction(loaded: Any, analysis: Any, configs: list[WorkerConfig], call: Any, sync: Any) -> Any:
    """What the branches could give (`profiling/trace/prediction.py`), from sequential steps of the
    model's own forward timed with hooks (`branch_timing`), at the sequential configuration's
    intra-op count (else the first's), after the paired rounds; None without regions or times."""
    if not analysis.regions:
        return None
    import torch

    from branchscope.profiling.run.branch_timing import MIN_STEPS, UnmatchedCalls, measure_branch_times
    from branchscope.profiling.trace.prediction import FROM_MEASURED, predict_from
    from branchscope.profiling.trace.records import BranchRecord

    intra = next((c.intra for c in configs if not mode_named(c.mode).needs_branches), configs[0].intra)
    torch.set_num_threads(intra)
    try:
        measured = measure_branch_times(
            loaded.model, analysis, lambda: call(loaded.model, "measuring its branches"), MIN_STEPS * 2, sync
        )
    except (RunFailure, UnmatchedCalls):
        return None
    if measured is None:
        return None
    return predict_from([BranchRecord(**b) for b in analysis.to_json()], measured, source=FROM_MEASURED)


def main(argv: list[str] | None = None) -> NoReturn:
    die_with_parent()  # first: a runner killed from here on takes this worker with it
    args = build_arg_parser().parse_args(argv)
    sys.dont_write_bytecode = True
    proto = _Protocol()
    faulthandler.enable()
    # As the worker: the record written, `finished` said, then os._exit (forked TorchScript may
    # abort in interpreter teardown).
    _run_and_exit(args, proto, produce=lambda: measure(args, proto), name=PAIRED_TIMES_JSON)


if __name__ == "__main__":
    main()
