"""fork: each region's branches launched with `torch.jit.fork` and joined with `torch.jit.wait`
in a TorchScript plan, so they run on torch's inter-op pool (fork runs a branch inline in eager
Python: the plan must be scripted)."""

from __future__ import annotations

import re
from typing import Any

from branchscope.profiling.run.modes import HigherOrderUnavailable, Mode, ModeUnavailable
from branchscope.profiling.trace.mode_traits import INTEROP_POOL, ModeTraits


def emit_region(
    gen: Any, launched: list[Any], indent: str, inputs_dropped: list[str], one_at_a_time: bool = False
) -> list[str]:
    """Fork every branch of the region (then drop `inputs_dropped`), then wait for each and unpack its
    results (`one_at_a_time`: wait for each as soon as it is forked)."""
    from branchscope.profiling.run.plans import start_then_join

    return start_then_join(
        gen, launched, indent, inputs_dropped, "torch.jit.fork({fn}{args})", "torch.jit.wait({handle})", one_at_a_time
    )


def compiler_summary(message: str, limit: int = 400) -> str:
    """TorchScript's message up to the source excerpt it quotes, on one line: its first line is often
    only the signature it failed on ("_branch0(… (Tensor, Tensor) v_split) -> ((Tensor)):"), the
    cause on the lines after ("Expected a value of type 'Tuple[Tensor, Tensor]' … found type
    'List[Tensor]'")."""
    kept: list[str] = []
    lines = message.strip().splitlines()
    for line in lines:
        text = line.strip()
        if not text or text == ":" or text.startswith(("File \"", "~", "^")):
            break
        kept.append(text)
    summary = " ".join(kept).rstrip(": ")
    if len(summary) > limit:
        summary = summary[: limit - 1] + "…"
    where = next((m for line in lines if (m := re.match(r'\s*File "([^"<][^"]*)", line (\d+)', line))), None)
    return f"{summary} (at {where[1]}, line {where[2]})" if where else summary


def torchscript_problem() -> str | None:
    """Why this torch cannot run fork mode's plans (TorchScript is deprecated upstream: a torch may
    lack it, raise at `torch.jit.script`, or run it disabled, `PYTORCH_JIT=0`, where a "scripted"
    function is the Python function and fork runs inline), in a few words; None when a function that
    forks and waits compiles. It is not called: that would start the inter-op pool before the worker's
    thread census could tell its threads apart."""
    import warnings

    import torch

    from branchscope.profiling.run.plans import fork_and_wait

    jit = getattr(torch, "jit", None)
    for name in ("script", "fork", "wait"):
        if not callable(getattr(jit, name, None)):
            return f"this torch has no torch.jit.{name}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            scripted = torch.jit.script(fork_and_wait)
            if not isinstance(scripted, torch.jit.ScriptFunction):
                return "TorchScript is disabled in this torch (torch.jit.script gives back the Python function: PYTORCH_JIT=0?)"
    except Exception as exc:  # noqa: BLE001 - whatever this torch raises is the reason
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"torch.jit.script raised {type(exc).__name__}: {first}"[:300]
    return None


def check() -> str | None:
    """fork mode needs TorchScript (see `torchscript_problem`); the line names threads mode."""
    problem = torchscript_problem()
    if problem is None:
        return None
    import torch

    return (
        f"fork mode needs TorchScript, and {problem} (torch {torch.__version__}): use threads mode (--mode "
        "threads), which runs the same branches on a pool of Python threads in eager PyTorch"
    )


def start_pool(threads: int) -> None:
    """Starts torch's inter-op pool (its size was set first thing in the worker)."""
    from branchscope.profiling.run.cpu_sampler import settle_interop_pool
    from branchscope.profiling.run.plans import start_interop_pool

    start_interop_pool()
    settle_interop_pool()


def settle() -> None:
    """Waits until torch's inter-op pool has finished its tasks (at most a second).

    TorchScript runs what follows a `wait` in the plan's forward (the join, `cat`) on the pool thread
    that completed the awaited future, and that thread's task holds the interpreter's state, whose
    future holds the forward's output, until the task object is destroyed: after the task's
    thread-local profiler state is gone. When the main thread drops the output first, the pool thread
    frees it there, and torch.profiler records no free (nor, for the CPU, takes it off its running
    "Total Allocated"): each step's output then looks alive to the end of the profile. Waiting for
    the pool before the worker drops a step's output makes the main thread free it, recorded."""
    from branchscope.profiling.run.cpu_sampler import settle_interop_pool

    settle_interop_pool()


def launcher(one_at_a_time: bool = False) -> Any:
    """This mode's part of the generated plan (`plans.Launcher`); TorchScript calls no higher-order ops."""
    from functools import partial

    from branchscope.profiling.run.plans import Launcher

    return Launcher("fork", partial(emit_region, one_at_a_time=one_at_a_time), higher_order=False)


def build_plan(model: Any, analysis: Any, device: str, one_at_a_time: bool = False) -> Any:
    """The generated plan, compiled by TorchScript (`one_at_a_time`: each fork waited for at once)."""
    import time
    import warnings

    import torch

    from branchscope.profiling.run.plans import Plan, generate_plan_module

    t0 = time.perf_counter()
    try:
        module, source = generate_plan_module(analysis, launcher(one_at_a_time))
    except HigherOrderUnavailable as exc:  # threads mode's eager plan calls it
        raise ModeUnavailable(f"{exc}; or run --mode threads, which runs it in eager PyTorch", files=exc.files) from exc
    t1 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated", category=DeprecationWarning)
            scripted = torch.jit.script(module)
    except Exception as exc:
        raise ModeUnavailable(
            f"fork mode: TorchScript could not compile the plan generated from the graph {analysis.tracer} "
            f"gave: {compiler_summary(str(exc))}",
            files={"plan.py": source, "plan-error.txt": f"{type(exc).__name__}: {exc}\n"},
        ) from exc
    return Plan("fork", scripted, source, analysis, build_s=t1 - t0, compile_s=time.perf_counter() - t1)


#: Branches side by side on torch's inter-op pool.
TRAITS = ModeTraits(pool=INTEROP_POOL, title="fork", plan_title="TorchScript's plan",
                    runs_as="on {interop} inter-op thread{s}", way="forking its branches")
MODE = Mode("fork", "fork (inter-op pool)", "TorchScript fork/wait: each region's branches on torch's inter-op thread pool",
            build_plan, TRAITS, needs_torchscript=True, start_pool=start_pool, check=check, settle=settle,
            instead="threads")
