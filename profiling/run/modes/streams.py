"""streams: the plan as eager Python in which each branch runs on its own `torch.cuda.Stream`: the
side stream first waits for the launching stream, inputs are marked with `record_stream` so the
caching allocator does not reuse them early, and the launching stream waits for an event recorded
after the branch."""

from __future__ import annotations

from typing import Any

from branchscope.profiling.run.modes import Mode, ModeUnavailable
from branchscope.profiling.trace.mode_traits import CUDA_STREAMS, ModeTraits


def emit_region(gen: Any, launched: list[Any], indent: str, inputs_dropped: list[str]) -> list[str]:
    """Each branch on its own stream, after the launching stream's work so far (the inputs used last
    here dropped once the last branch is launched and `record` has told the allocator of their
    streams); then join."""
    from branchscope.profiling.run.plans import unpacked

    cur = f"_cur{launched[0].t}"
    lines = [f"{indent}{cur} = _api.current_stream()"]
    for b in launched:
        args = ", ".join(gen.var(i) for i in b.ins)
        stream = f"self._streams[{b.t}]"
        lines += [
            f"{indent}{stream}.wait_stream({cur})",
            f"{indent}with _api.stream({stream}):",
            f"{indent}    _res{b.t} = self.{b.method}({args})",
            f"{indent}_api.record(({args}{',' if b.ins else ''}), {stream})",
            *(inputs_dropped if b is launched[-1] else []),
            f"{indent}_ev{b.t} = _api.new_event()",
            f"{indent}_ev{b.t}.record({stream})",
        ]
    for b in launched:
        lines += [f"{indent}{cur}.wait_event(_ev{b.t})", f"{indent}_api.record(_res{b.t}, {cur})"]
        lines += unpacked(gen, b, indent)
    return lines


def launcher(api: Any) -> Any:
    """This mode's part of the generated plan (`plans.Launcher`): `api` makes the streams and events
    (`plans.CudaStreamApi`, or a fake one in tests); each branch gets its stream once the plan exists."""
    from branchscope.profiling.run.plans import Launcher

    def setup(module: Any, branches: int) -> None:
        module._streams = [api.new_stream() for _ in range(branches)]

    return Launcher("streams", emit_region, namespace={"_api": api}, setup=setup)


def build_plan(model: Any, analysis: Any, device: str, api: Any = None) -> Any:
    """The generated plan with a stream per branch (`api`: the CUDA calls, a fake one in tests)."""
    import time

    import torch

    from branchscope.profiling.run.plans import CudaStreamApi, Plan, generate_plan_module

    if api is None:
        if not torch.cuda.is_available() or torch.device(device).type != "cuda":
            raise ModeUnavailable("multi-stream needs CUDA: this machine has no CUDA device torch can use")
        api = CudaStreamApi(torch.device(device))
    t0 = time.perf_counter()
    module, source = generate_plan_module(analysis, launcher(api))
    return Plan("streams", module, source, analysis, build_s=time.perf_counter() - t0)


#: Each branch on a CUDA stream of its own (no pool of threads).
TRAITS = ModeTraits(pool=CUDA_STREAMS, title="multi-stream", plan_title="the streams plan",
                    runs_as="on one CUDA stream each")
MODE = Mode("streams", "multi-stream (CUDA)", "each branch on its own CUDA stream, joined with events",
            build_plan, TRAITS, needs_cuda=True, aliases=("multi-stream",))
