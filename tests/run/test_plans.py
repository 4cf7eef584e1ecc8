"""Execution plans: generated fork / streams modules give the model's outputs and mark their branches."""

from __future__ import annotations

import ast
import contextlib

import pytest
import torch
from torch import nn

from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.cpu_sampler import settle_interop_pool
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.modes import fork, streams, threads
from branchscope.profiling.run.plans import (
    ModeUnavailable,
    build_plan,
    generate_plan_module,
    max_abs_diff,
)
from tests.paths import MODELS
from tests.run.profiled_plans import branch_labels_in_trace

CPU_DEMOS = ["attention-qkv", "inception", "lstm-ensemble", "twin-mm"]


def _prepare(spec):
    loaded = load_model(spec)
    return loaded, find_branches(loaded.model, loaded.inputs)


def _outputs(fn, inputs):
    with torch.no_grad():
        return fn(*inputs)


@pytest.mark.parametrize("name", CPU_DEMOS)
def test_fork_plan_matches_the_model_for_every_cpu_demo(name):
    loaded, analysis = _prepare(ModelSpec(demo=name))
    plan = build_plan("fork", loaded.model, analysis)
    assert isinstance(plan.module, torch.jit.ScriptModule)
    diff = max_abs_diff(_outputs(loaded.model, loaded.inputs), _outputs(plan, loaded.inputs))
    assert diff <= 1e-5


def test_fork_plan_matches_a_two_input_model():
    loaded, analysis = _prepare(ModelSpec(path=MODELS / "two_tower.py"))
    plan = build_plan("fork", loaded.model, analysis)
    assert max_abs_diff(_outputs(loaded.model, loaded.inputs), _outputs(plan, loaded.inputs)) <= 1e-5


def test_fork_source_forks_waits_and_marks_every_branch():
    loaded, analysis = _prepare(ModelSpec(demo="lstm-ensemble"))
    plan = build_plan("fork", loaded.model, analysis)
    names = [row["name"] for row in analysis.to_json()]
    assert plan.source.count("torch.jit.fork(") == len(names) == 12
    assert plan.source.count("torch.jit.wait(") == 12
    for name in names:
        assert f"record_function('branch: {name}')" in plan.source


def test_forked_branches_run_on_inter_op_threads():
    import threading

    loaded, analysis = _prepare(ModelSpec(demo="twin-mm"))
    plan = build_plan("fork", loaded.model, analysis)
    _outputs(plan, loaded.inputs)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _outputs(plan, loaded.inputs)
        assert settle_interop_pool(timeout_s=10.0)  # before the profiler stops: see its docstring
    branch_threads = {
        e.name: e.thread for e in prof.events() if e.name in ("branch: Wy", "branch: Wz")
    }
    assert set(branch_threads) == {"branch: Wy", "branch: Wz"}
    main = threading.get_native_id()
    assert all(tid != main for tid in branch_threads.values())


def test_sequential_plan_is_the_model_itself():
    loaded, analysis = _prepare(ModelSpec(demo="twin-mm"))
    plan = build_plan("sequential", loaded.model, analysis)
    assert plan.module is loaded.model and plan.source is None


def test_streams_without_cuda_cannot_run():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    loaded, analysis = _prepare(ModelSpec(demo="twin-mm"))
    with pytest.raises(ModeUnavailable, match="multi-stream needs CUDA"):
        build_plan("streams", loaded.model, analysis)


class _FakeStream:
    def __init__(self, log, k):
        self.log, self.k = log, k

    def wait_stream(self, other):
        self.log.append(("wait_stream", self.k, other.k))

    def wait_event(self, event):
        self.log.append(("wait_event", self.k, event.stream))

    def __repr__(self):
        return f"stream{self.k}"


class _FakeEvent:
    def __init__(self, log):
        self.log, self.stream = log, None

    def record(self, stream):
        self.stream = stream.k
        self.log.append(("record_event", stream.k))


class _FakeStreamApi:
    """CUDA's stream calls, logged: checks the streams plan's ordering on a CPU-only machine."""

    def __init__(self):
        self.log, self.current, self.count = [], None, 0
        self.main = _FakeStream(self.log, "main")
        self.current = self.main

    def new_stream(self):
        self.count += 1
        return _FakeStream(self.log, self.count - 1)

    def current_stream(self):
        return self.current

    @contextlib.contextmanager
    def stream(self, s):
        previous, self.current = self.current, s
        self.log.append(("enter", s.k))
        try:
            yield
        finally:
            self.current = previous
            self.log.append(("exit", s.k))

    def new_event(self):
        return _FakeEvent(self.log)

    def record(self, value, stream):
        self.log.append(("record_stream", stream.k, len(value) if isinstance(value, tuple) else 1))


def test_streams_plan_orders_each_branch_on_its_own_stream():
    loaded, analysis = _prepare(ModelSpec(demo="inception"))
    api = _FakeStreamApi()
    plan = streams.build_plan(None, analysis, "cpu", api)
    assert max_abs_diff(_outputs(loaded.model, loaded.inputs), _outputs(plan, loaded.inputs)) <= 1e-5
    entered = [k for op, k, *_ in api.log if op == "enter"]
    assert entered == [0, 1, 2, 3]  # four branches, four streams
    for k in range(4):
        before = api.log.index(("enter", k))
        assert api.log[before - 1] == ("wait_stream", k, "main")  # starts after the launching stream
        assert ("record_event", k) in api.log
        assert ("wait_event", "main", k) in api.log  # the join waits for the branch
    assert "_api.record(" in plan.source


def test_fork_needs_branches_and_says_why():
    loaded, analysis = _prepare(ModelSpec(path=MODELS / "no_branches.py"))
    with pytest.raises(ModeUnavailable, match="found none"):
        build_plan("fork", loaded.model, analysis)
    loaded, analysis = _prepare(ModelSpec(path=MODELS / "data_dependent.py"))
    with pytest.raises(ModeUnavailable, match="control flow"):
        build_plan("fork", loaded.model, analysis)


def test_generated_source_is_plain_python_with_flat_attributes():
    _, analysis = _prepare(ModelSpec(demo="inception"))
    module, source = generate_plan_module(analysis, fork.launcher())
    assert "self.m_branch5x5_1_conv(" in source
    assert isinstance(module, nn.Module)
    compile(source, "<plan>", "exec")


def _statements(body):
    """A function's statements in the order they run, each `with` block's body in its place."""
    for s in body:
        if isinstance(s, ast.With):
            yield from _statements(s.body)
        else:
            yield s


def kept_past_last_use(source):
    """(method, name) of each local of a generated plan that holds a tensor (a parameter, a value
    `v_…`, a branch's results `_res…` or the future `_fut…` that holds them) that it does not return
    and does not drop (`del`) right after the statement that uses it last (only other `del`s between)."""
    kept = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        last = {a.arg: -1 for a in fn.args.args if a.arg != "self"}
        dropped, returned = {}, set()
        statements = list(_statements(fn.body))
        for i, s in enumerate(statements):
            names = [n for n in ast.walk(s) if isinstance(n, ast.Name)]
            if isinstance(s, ast.Delete):
                dropped.update({n.id: i for n in names})
            elif isinstance(s, ast.Return):
                returned.update(n.id for n in names)
            else:
                last.update({n.id: i for n in names if n.id in last or isinstance(n.ctx, ast.Store)})
        for name, i in last.items():
            if name in returned or not name.startswith(("v_", "_res", "_fut")):
                continue
            d = dropped.get(name)
            if d is None or d < i or not all(isinstance(s, ast.Delete) for s in statements[i + 1 : d]):
                kept.append((fn.name, name))
    return kept


def test_the_checker_finds_a_value_kept_past_its_last_use():
    source = "def f(self, v_x):\n    v_a = g(v_x)\n    v_b = g(v_a)\n    del v_x\n    return v_b\n"
    assert kept_past_last_use(source) == [("f", "v_x"), ("f", "v_a")]


@pytest.mark.parametrize("name", ["inception", "lstm-ensemble"])
def test_every_generated_plan_drops_each_value_after_its_last_use(name):
    """As the model's own forward (torch.fx's code) does: a branch that kept its intermediates to its
    end freed them in one batch there, and a threads run peaked far above the sequential run."""
    loaded, analysis = _prepare(ModelSpec(demo=name))
    on_no_pool = threads.ThreadLauncher(pool=None)
    launchers = [fork.launcher(), threads.launcher(on_no_pool), streams.launcher(_FakeStreamApi())]
    launchers += [fork.launcher(one_at_a_time=True), threads.launcher(on_no_pool, one_at_a_time=True)]
    for launcher in launchers:
        _, source = generate_plan_module(analysis, launcher)
        assert source.count("del v_") > len(analysis.to_json()), launcher.mode
        assert kept_past_last_use(source) == [], launcher.mode


def test_max_abs_diff_over_nested_outputs():
    a = (torch.zeros(2), [torch.ones(3)], {"k": torch.full((1,), 2.0)})
    b = (torch.zeros(2), [torch.ones(3) + 0.25], {"k": torch.full((1,), 2.0)})
    assert max_abs_diff(a, a) == 0.0
    assert max_abs_diff(a, b) == pytest.approx(0.25)
    assert max_abs_diff(a, (torch.zeros(2),)) == float("inf")
    assert max_abs_diff(torch.zeros(2), torch.zeros(3)) == float("inf")


@pytest.mark.parametrize("mode", ["sequential", "fork"])
def test_every_inception_branch_is_marked_by_name_in_the_trace(mode, tmp_path):
    loaded, analysis = _prepare(ModelSpec(demo="inception"))
    plan = build_plan(mode, loaded.model, analysis)
    trace, assignment = branch_labels_in_trace(plan, loaded, tmp_path)
    expected = {branch.name for _, branch, _ in analysis.walk()}
    assert len(expected) == 4
    assert set(assignment.names) == expected
    assert "unknown" not in trace.names
    # The convolutions of each branch are attributed to it.
    convs = [i for i in range(len(trace)) if trace.event_name(i) == "aten::conv2d"]
    assert convs and all(assignment.event_branch[i] >= 0 for i in convs)


def test_sequential_plan_still_runs_the_models_own_forward():
    loaded, analysis = _prepare(ModelSpec(demo="inception"))
    plan = build_plan("sequential", loaded.model, analysis)
    assert plan.module is loaded.model
    assert max_abs_diff(_outputs(loaded.model, loaded.inputs), _outputs(plan, loaded.inputs)) == 0.0


def test_max_abs_diff_through_dataclasses_and_model_outputs():
    from dataclasses import dataclass

    from transformers.modeling_outputs import BaseModelOutput

    @dataclass
    class Out:
        logits: torch.Tensor
        extra: tuple

    a = Out(torch.zeros(2), (torch.ones(1), {"h": [torch.zeros(3)]}))
    b = Out(torch.zeros(2), (torch.ones(1), {"h": [torch.zeros(3) - 0.5]}))
    assert max_abs_diff(a, a) == 0.0 and max_abs_diff(a, b) == pytest.approx(0.5)
    assert max_abs_diff(a, Out(torch.zeros(2), (torch.ones(1), {"g": [torch.zeros(3)]}))) == float("inf")  # other key
    m = BaseModelOutput(last_hidden_state=torch.zeros(2, 3), hidden_states=(torch.ones(1),))
    n = BaseModelOutput(last_hidden_state=torch.full((2, 3), 0.125), hidden_states=(torch.ones(1),))
    assert max_abs_diff(m, n) == pytest.approx(0.125)
    assert max_abs_diff(m, BaseModelOutput(last_hidden_state=torch.zeros(2, 3))) == float("inf")  # a leaf missing


def test_fork_plan_takes_keyword_inputs_for_a_graph_from_torch_fx():
    loaded, _ = _prepare(ModelSpec(path=MODELS / "two_tower.py"))
    kwargs = {"item": loaded.inputs[1], "user": loaded.inputs[0]}  # by name, in another order
    analysis = find_branches(loaded.model, (), kwargs)
    assert analysis.tracer == "torch.fx"
    plan = build_plan("fork", loaded.model, analysis)
    with torch.no_grad():
        expected = loaded.model(**kwargs)
        assert max_abs_diff(expected, plan(**kwargs)) <= 1e-5
        assert max_abs_diff(expected, plan(loaded.inputs[0], item=loaded.inputs[1])) <= 1e-5


def test_fork_plan_of_the_attention_demo_forks_query_key_and_value_per_layer():
    loaded, analysis = _prepare(ModelSpec(demo="attention-qkv"))
    assert [[b.name for b in r.branches] for r in analysis.regions] == [
        [f"layers.{k}.attention.{p}" for p in ("query", "key", "value")] for k in range(2)
    ]
    plan = build_plan("fork", loaded.model, analysis)
    assert plan.source.count("torch.jit.fork(") == 6
