"""threads mode in process: its plan gives the model's outputs for every CPU demo, runs its branches on
the pool's Python threads (which the profiler records when asked to), carries the launching thread's
grad mode, runs models TorchScript cannot, and never deadlocks on nested regions; fork mode says when
this torch has no working TorchScript, naming threads mode."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from branchscope.profiling.run import branch_regions
from branchscope.profiling.run.branch_pool import BranchPool
from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.modes import fork, mode_named, threads
from branchscope.profiling.run.plans import ModeUnavailable, build_plan, max_abs_diff
from tests.paths import MODELS

CPU_DEMOS = ["attention-qkv", "inception", "lstm-ensemble", "small-ops", "twin-mm", "two-towers"]


@pytest.fixture(scope="module")
def pool():
    p = BranchPool(2)
    yield p
    p.shutdown()


def _prepare(spec, grad=False):
    loaded = load_model(spec)
    return loaded, find_branches(loaded.model, loaded.inputs, loaded.kwargs, grad=grad)


def _outputs(fn, loaded):
    with torch.no_grad():
        return fn(*loaded.inputs, **loaded.kwargs)


@pytest.mark.parametrize("name", CPU_DEMOS)
def test_threads_plan_matches_the_model_for_every_cpu_demo(name, pool):
    loaded, analysis = _prepare(ModelSpec(demo=name))
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=pool)
    assert not isinstance(plan.module, torch.jit.ScriptModule)  # eager Python, no TorchScript
    assert plan.source.count("_threads.submit(") == sum(1 for _ in analysis.walk()) >= 2
    assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) <= 1e-5


def test_branches_run_on_the_pool_threads_and_the_profiler_records_them(pool, tmp_path):
    from branchscope.profiling.run.profiled_steps import profiler_threads

    loaded, analysis = _prepare(ModelSpec(demo="twin-mm"))
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=pool)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **profiler_threads(torch, threads.MODE)) as prof:
        _outputs(plan, loaded)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    where = {e["name"]: e["tid"] for e in events if e.get("name") in ("branch: Wy", "branch: Wz")}
    assert set(where) == {"branch: Wy", "branch: Wz"}
    assert set(where.values()) <= set(pool.tids) and threading.get_native_id() not in where.values()
    assert profiler_threads(torch, fork.MODE) == {}  # fork's pool threads carry the profiler themselves


def test_branches_take_the_launching_threads_grad_mode(pool):
    loaded, analysis = _prepare(ModelSpec(demo="twin-mm"))
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=pool)
    with torch.no_grad():
        assert not plan(*loaded.inputs).requires_grad
    out = plan(*loaded.inputs)  # grad on: autograd's graph crosses the threads
    assert out.requires_grad
    out.sum().backward()
    assert loaded.model.Wy.weight.grad is not None and loaded.model.Wz.weight.grad is not None


def test_nested_regions_on_a_pool_of_one_thread_never_deadlock():
    loaded, analysis = _prepare(ModelSpec(demo="lstm-ensemble"))
    assert any(branch.regions for _, branch, _ in analysis.walk())  # branches holding regions of their own
    one = BranchPool(1)
    try:
        plan = threads.build_plan(loaded.model, analysis, "cpu", pool=one)
        assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) <= 1e-5
    finally:
        one.shutdown()


def test_threads_runs_a_model_whose_fork_plan_torchscript_cannot_compile(pool):
    loaded, analysis = _prepare(ModelSpec(path=MODELS / "uncompilable_plan.py"))
    with pytest.raises(ModeUnavailable, match="TorchScript could not compile"):
        build_plan("fork", loaded.model, analysis)
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=pool)
    assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) == 0.0


def test_threads_calls_the_higher_order_ops_a_torchscript_plan_cannot(pool, monkeypatch):
    monkeypatch.setattr(branch_regions, "SMALL_SHARE", 0.0)  # keep the wrapper's small region
    monkeypatch.setattr(branch_regions, "TINY_SHARE", 0.0)
    loaded, analysis = _prepare(ModelSpec(path=MODELS / "grad_wrapped.py"), grad=True)
    with pytest.raises(ModeUnavailable, match="wrap_with_set_grad_enabled"):
        build_plan("fork", loaded.model, analysis)
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=pool)
    assert "wrap_with_set_grad_enabled" in plan.source
    assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) <= 1e-6


def test_threads_is_a_registered_mode_with_a_pool_of_its_own():
    mode = mode_named("threads")
    assert mode.starts_interop_pool and mode.profile_all_threads and not mode.needs_torchscript
    assert mode.check is None and mode.traits.runs_text(2) == "on 2 Python threads"


# ---------------------------------------------------------------- fork without TorchScript


def test_a_torch_with_working_torchscript_has_no_problem():
    assert fork.torchscript_problem() is None and fork.check() is None


def test_a_torch_whose_script_raises_makes_fork_name_threads_mode(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise RuntimeError("TorchScript was removed in this release\nmore")

    monkeypatch.setattr(torch.jit, "script", refuse)
    line = fork.check()
    assert line.startswith("fork mode needs TorchScript, and torch.jit.script raised RuntimeError: TorchScript was removed")
    assert "--mode threads" in line and "\n" not in line


def test_a_torch_without_jit_fork_makes_fork_name_threads_mode(monkeypatch):
    monkeypatch.delattr(torch.jit, "fork")
    line = fork.check()
    assert "this torch has no torch.jit.fork" in line and "--mode threads" in line


def test_disabled_torchscript_is_no_torchscript(monkeypatch):
    monkeypatch.setattr(torch.jit, "script", lambda fn, *a, **k: fn)  # what PYTORCH_JIT=0 does
    assert "TorchScript is disabled" in fork.check()
