"""sequential: the model's own forward, one op after another on the main thread (the baseline)."""

from __future__ import annotations

from typing import Any

from branchscope.profiling.run.modes import Mode


def build_plan(model: Any, analysis: Any, device: str) -> Any:
    """The model itself, its branches marked from outside (forward hooks) so the trace shows them."""
    from branchscope.profiling.run.plans import Plan, annotate_branches_with_hooks

    return Plan("sequential", model, marks=annotate_branches_with_hooks(model, analysis))


MODE = Mode(
    name="sequential",
    title="sequential",
    label="sequential",
    description="the model's own forward: every branch one after another on the main thread",
    runs_as="one after another on the main thread",
    build_plan=build_plan,
    needs_branches=False,
    plan_title="the model's own forward",
)
