"""Each branch's time in the model's own forward, measured in the worker for the prediction
(`profiling/run/branch_timing.py`): hooks on the branches, removed afterwards."""

from __future__ import annotations

import itertools

import pytest
import torch

from branchscope.profiling.run.branch_timing import measure_branch_times
from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.model_source import ModelSpec, load_model


@pytest.fixture(scope="module")
def twin():
    loaded = load_model(ModelSpec(demo="twin-mm"))
    return loaded, find_branches(loaded.model, loaded.inputs)


def _hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_each_branch_is_timed_between_its_first_and_last_module_call(twin):
    loaded, analysis = twin
    ticks = itertools.count()
    calls = []

    def step() -> None:
        calls.append(1)
        with torch.no_grad():
            loaded.model(*loaded.inputs)

    # One tick per clock reading: the step reads it at its start and end, each branch at its start
    # and end (Wy then Wz, one after the other): a branch spans 1 tick, a step 5.
    samples = measure_branch_times(loaded.model, analysis, step, 3, clock=lambda: float(next(ticks)))
    assert samples is not None
    assert samples.steps_ms == [5000.0] * 3
    assert samples.branch_ms == [{"Wy": 1000.0, "Wz": 1000.0}] * 3
    assert samples.typical() == (5000.0, {"Wy": 1000.0, "Wz": 1000.0}, 3)
    assert len(calls) == 4  # one unmeasured step first
    assert _hooks(loaded.model) == 0


def test_real_times_add_up_to_no_more_than_the_step(twin):
    loaded, analysis = twin

    def step() -> None:
        with torch.no_grad():
            loaded.model(*loaded.inputs)

    samples = measure_branch_times(loaded.model, analysis, step, 3)
    assert samples is not None and len(samples.steps_ms) == 3
    for step_ms, branch_ms in zip(samples.steps_ms, samples.branch_ms, strict=True):
        assert set(branch_ms) == {"Wy", "Wz"} and all(t > 0 for t in branch_ms.values())
        assert sum(branch_ms.values()) <= step_ms  # disjoint stretches of one step


def test_the_hooks_go_whatever_the_step_raised(twin):
    loaded, analysis = twin

    def step() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        measure_branch_times(loaded.model, analysis, step, 2)
    assert _hooks(loaded.model) == 0


def test_a_torchscript_module_has_no_hooks_to_time(twin):
    loaded, analysis = twin
    scripted = torch.jit.script(loaded.model)
    assert measure_branch_times(scripted, analysis, lambda: None, 2) is None
