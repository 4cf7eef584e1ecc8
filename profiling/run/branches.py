"""Finding a model's parallel branches in its graph: fork-join regions, nested regions, two-tower inputs.

`find_branches` is the entry point, and `BranchAnalysis` what it finds. The work is done along the
way it goes, one module a step:

* `graph_tracers`: the graph, from the first tracer that succeeds (torch.fx, then torch.export
  non-strict and strict); `BranchAnalysis.tracer` says which one found it, and `tracer_errors` why
  the ones before it failed.
* `branch_work`: one run of the graph on the example inputs, which gives each node's TorchScript
  type and its work (FLOPs from shapes, and the elements it moves).
* `branch_regions`: the regions, where two or more branches (chains of nodes) could run at the same
  time, nested regions inside branches, and what was left out and why.
* `branch_names`: names for the branches and regions, from where they run in the model
  (`Mixed_6a.branch3x3`, `Mixed_6a: max_pool2d`).

`graph_nodes` says what a node is (its op, its module) for all of them.

This module imports torch, so it runs in the worker process only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from branchscope.profiling.run.branch_names import name_regions
from branchscope.profiling.run.branch_regions import (
    Branch,
    LeftOut,
    Region,
    RegionFinder,
    subgraphs_not_searched,
)
from branchscope.profiling.run.branch_work import ValueRecorder
from branchscope.profiling.run.graph_tracers import (
    first_line,
    graph_inputs,
    no_graph_text,
    no_progress_thread,
    trace_graph,
)


@dataclass
class BranchAnalysis:
    """Result of branch discovery. `graph_module` is None when no tracer could trace; `fx_error` says why."""

    graph_module: fx.GraphModule | None
    regions: list[Region]
    #: Why there is no graph at all (None when a tracer found one).
    fx_error: str | None = None
    #: TorchScript type of each node's value from one example run (e.g. "Tensor", "List[int]").
    value_types: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The tracer that found the graph (one of TRACERS), None when none did.
    tracer: str | None = None
    #: Why each tracer tried before (or instead of) it failed: {tracer: one line}.
    tracer_errors: dict[str, str] = field(default_factory=dict)
    #: For a graph from torch.export: how (args, kwargs) flatten into the graph's inputs and how its
    #: flat outputs nest back into the model's output (torch.utils._pytree specs); None for torch.fx.
    in_spec: Any = None
    out_spec: Any = None
    #: What could have been branches and was left out, and why (assertions, scalar work, branches
    #: too small beside the others of their region), in graph order.
    left_out: list[LeftOut] = field(default_factory=list)
    #: Seconds each tracer tried took, whether it found the graph or failed: {tracer: s}, in order.
    tracer_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def exported(self) -> bool:
        return self.in_spec is not None

    def graph_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The graph's placeholder values for a call `model(*args, **kwargs)`."""
        assert self.graph_module is not None
        return graph_inputs(self.graph_module, self.in_spec, args, kwargs)

    def walk(self) -> list[tuple[Region, Branch, str | None]]:
        """Every (region, branch, name of the enclosing branch or None) in pre-order."""
        out: list[tuple[Region, Branch, str | None]] = []

        def visit(regions: list[Region], parent: str | None) -> None:
            for region in regions:
                for branch in region.branches:
                    out.append((region, branch, parent))
                for branch in region.branches:
                    visit(branch.regions, branch.name)

        visit(self.regions, None)
        return out

    def to_json(self) -> list[dict[str, Any]]:
        """The `branches` list of run.json and of the trace's `branchscope` object."""
        return [
            {
                "name": branch.name,
                "region": region.id,
                "region_name": region.name,
                "ops": branch.ops,
                "fork": region.fork,
                "join": region.join,
                "depth": region.depth,
                "parent": parent,
            }
            for region, branch, parent in self.walk()
        ]


def find_branches(
    model: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *, grad: bool = False
) -> BranchAnalysis:
    """Traces `model(*inputs, **kwargs)` (torch.fx, else torch.export) and finds its fork-join regions.
    `grad`: the plan runs with grad on (a model file's train_step), else under no_grad (inference).

    Never raises for a model no tracer can handle: the analysis then has no graph and `fx_error` says
    why (the sequential mode still runs the model as it is).
    """
    kwargs = dict(kwargs or {})
    no_progress_thread()
    if isinstance(model, torch.jit.ScriptModule):
        return BranchAnalysis(None, [], "torch.fx cannot trace a TorchScript module; only sequential mode runs it")
    seconds: dict[str, float] = {}
    gm, in_spec, out_spec, tracer, errors = trace_graph(model, inputs, kwargs, grad, seconds)
    if gm is None:
        return BranchAnalysis(None, [], no_graph_text(errors, model), tracer_errors=errors, tracer_seconds=seconds)
    recorder = ValueRecorder(gm)
    try:
        with torch.no_grad():
            recorder.run(*graph_inputs(gm, in_spec, inputs, kwargs))
    except Exception as exc:
        return BranchAnalysis(
            None, [], f"the graph {tracer} traced does not run: {first_line(exc)}", tracer=None, tracer_errors=errors,
            tracer_seconds=seconds,
        )
    finder = RegionFinder(gm, recorder)
    regions = finder.regions()
    name_regions(gm, regions, finder.work)
    notes = finder.notes + subgraphs_not_searched(gm)
    return BranchAnalysis(
        gm, regions, None, recorder.types, notes, tracer, errors, in_spec, out_spec, finder.left_out_in_order(),
        tracer_seconds=seconds,
    )
