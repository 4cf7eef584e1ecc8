"""threads: the plan as eager Python in which each region's branches are submitted to a pool of
`--interop` Python threads (`branch_pool.BranchPool`, this mode's inter-op pool) and joined; the
model's own Python runs the rest on the main thread. No TorchScript: it runs every model whose graph
discovery finds, higher-order ops included.

ATen ops release the GIL while they compute, so branches of large ops overlap about as well as
fork mode's; the Python between the ops and each op's entry need the GIL, so branches of many small
ops wait for it (run.json's `branch_threads`; a free-threaded CPython has no GIL to wait for).

A branch runs with the launching thread's grad mode and inference mode (torch keeps both per
thread). On CUDA each branch thread runs on the launching thread's current stream and device: the
branches' CPU work (Python, launches) overlaps, their kernels queue on one stream in the order they
were launched (multi-stream mode gives each branch a stream of its own).

A higher-order op (a `torch.cond`) runs as the graph has it, on the thread that reaches it, each of
its graphs (the cond's paths) whole: branches inside them are not searched, since a plan launches
branches only among the nodes of the model's own graph, and the analysis's notes (run.json's
`notes`) say so where a path could hold some (`branches._subgraphs_not_searched`).
"""

from __future__ import annotations

from typing import Any

from branchscope.profiling.run.modes import Mode
from branchscope.profiling.trace.mode_traits import PYTHON_POOL, ModeTraits

#: The pool the worker started before the model loaded (`start_pool`); plans submit to it.
_shared_pool: Any = None


def start_pool(threads: int) -> Any:
    """Starts this process's branch pool of `threads` Python threads (once) and gives it."""
    global _shared_pool
    from branchscope.profiling.run.branch_pool import BranchPool

    if _shared_pool is None:
        _shared_pool = BranchPool(threads)
    return _shared_pool


class SubmittedBranch:
    """A branch submitted to the pool, as the plan waits for it: `result()` gives what it returned.

    The value is kept here, not on the pool's task, and handed over by `result()`: a branch waited
    for by a pool thread that ran it itself stays in the pool's queue until a thread takes it off
    (after every branch queued before it), and its value with it would outlive the plan's last use
    of it, so a threads run would peak above the model's own forward."""

    def __init__(self) -> None:
        self.task: Any = None
        self.value: Any = None

    def run(self, call: Any) -> None:
        self.value = call()

    def result(self) -> Any:
        self.task.result()  # waits, and raises what the branch raised
        value, self.value = self.value, None
        return value


class ThreadLauncher:
    """What a threads plan calls to launch a branch: the branch with the launching thread's
    per-thread torch state (see the module docstring), submitted to the pool."""

    def __init__(self, pool: Any, device: str = "cpu") -> None:
        import torch

        self.pool = pool
        self.torch = torch
        self.cuda = torch.device(device) if torch.device(device).type == "cuda" else None

    def submit(self, fn: Any, *args: Any) -> Any:
        torch = self.torch
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        cuda = self.cuda
        stream = torch.cuda.current_stream(cuda) if cuda is not None else None

        def call() -> Any:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                if stream is None:
                    return fn(*args)
                with torch.cuda.device(cuda), torch.cuda.stream(stream):
                    return fn(*args)

        submitted = SubmittedBranch()
        submitted.task = self.pool.submit(submitted.run, call)
        return submitted


def emit_region(
    gen: Any, launched: list[Any], indent: str, inputs_dropped: list[str], one_at_a_time: bool = False
) -> list[str]:
    """Submit every branch of the region to the pool (then drop `inputs_dropped`), then wait for each
    and unpack its results (`one_at_a_time`: wait for each as soon as it is submitted)."""
    from branchscope.profiling.run.plans import start_then_join

    return start_then_join(
        gen, launched, indent, inputs_dropped, "_threads.submit({fn}{args})", "{handle}.result()", one_at_a_time
    )


def launcher(threads: ThreadLauncher, one_at_a_time: bool = False) -> Any:
    """This mode's part of the generated plan (`plans.Launcher`): eager Python, so higher-order ops
    are called as the graph has them."""
    from functools import partial

    from branchscope.profiling.run.plans import Launcher

    return Launcher("threads", partial(emit_region, one_at_a_time=one_at_a_time), namespace={"_threads": threads})


def build_plan(model: Any, analysis: Any, device: str, one_at_a_time: bool = False, pool: Any = None) -> Any:
    """The generated plan, its regions' branches on `pool` (default: the pool the worker started;
    one of two threads when none was, as in tests run in process; `one_at_a_time`: each branch
    waited for as soon as it is submitted)."""
    import time

    from branchscope.profiling.run.plans import Plan, generate_plan_module

    if pool is None:
        pool = _shared_pool if _shared_pool is not None else start_pool(2)
    t0 = time.perf_counter()
    module, source = generate_plan_module(analysis, launcher(ThreadLauncher(pool, device), one_at_a_time))
    return Plan("threads", module, source, analysis, build_s=time.perf_counter() - t0)


#: Branches side by side on a pool of Python threads, each measuring its wait for the GIL.
TRAITS = ModeTraits(pool=PYTHON_POOL, gil_measured=True, title="threads", plan_title="the threads plan",
                    runs_as="on {interop} Python thread{s}", way="running its branches on Python threads")
MODE = Mode("threads", "threads (Python pool)",
            "each region's branches on a pool of Python threads in eager PyTorch (ops release the GIL; no TorchScript)",
            build_plan, TRAITS, start_pool=start_pool, profile_all_threads=True)
