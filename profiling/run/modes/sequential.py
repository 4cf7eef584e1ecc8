"""sequential: the model's own forward, one op after another on the main thread (the baseline)."""

from __future__ import annotations

from typing import Any

from branchscope.profiling.run.modes import Mode
from branchscope.profiling.trace.mode_traits import ModeTraits


def build_plan(model: Any, analysis: Any, device: str) -> Any:
    """The model itself, its branches marked from outside (forward hooks) so the trace shows them."""
    from branchscope.profiling.run.plans import Plan, annotate_branches_with_hooks

    return Plan("sequential", model, marks=annotate_branches_with_hooks(model, analysis))


#: The baseline: no pool, the model's own forward.
TRAITS = ModeTraits(baseline=True, title="sequential", plan_title="the model's own forward",
                    runs_as="one after another on the main thread")
MODE = Mode("sequential", "sequential", "the model's own forward: every branch one after another on the main thread",
            build_plan, TRAITS, needs_branches=False)
