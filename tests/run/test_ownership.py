"""Branch time by what each branch owns (`profiling/run/ownership.py`): on models whose branches
share modules, interleave or share an embedding, each piece of a branch is marked once per step for
the branch whose nodes made it, and the branch times of a step never add up to more than the step."""

from __future__ import annotations

import collections

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from branchscope.profiling.run import graph_tracers
from branchscope.profiling.run.branch_timing import measure_branch_times
from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.ownership import PieceHooks, call_map
from branchscope.profiling.run.plans import annotate_branches_with_hooks
from branchscope.profiling.trace.prediction import FROM_MEASURED, predict_from
from branchscope.profiling.trace.records import BranchRecord
from tests.run.pattern_models import patterns

#: How many pieces each pattern's branches run in, per step (the interleaved model computes the
#: large scale's input, `x * 2.0`, before the small scale's first block: a piece of its own).
PIECES = {"siamese": [1, 1], "interleaved": [3, 4], "tied": [1, 1], "shared_blocks": [1] * 6}
#: What the step may exceed its branches' time by: the clock's reading between stretches.
TOLERANCE_MS = 0.05


def _no_fx(*_args, **_kwargs):
    raise RuntimeError("torch.fx switched off for this test")


@pytest.fixture(params=["torch.fx", "torch.export"])
def tracer(request, monkeypatch):
    if request.param == "torch.export":
        monkeypatch.setattr(graph_tracers.fx, "symbolic_trace", _no_fx)
    return request.param


def _analysis(name: str, tracer: str):
    model, inputs = patterns()[name]
    analysis = find_branches(model, inputs)
    assert analysis.tracer is not None and analysis.tracer.startswith(tracer), analysis.tracer_errors
    return model, inputs, analysis


def _step(model, inputs):
    def step() -> None:
        with torch.no_grad():
            model(*inputs)

    return step


def _profiled_step(model, inputs, analysis) -> list[tuple[str, int, int]]:
    """(name, start, end) of every event of one step profiled with sequential mode's branch marks."""
    hooks = annotate_branches_with_hooks(model, analysis)
    assert hooks is not None
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            _step(model, inputs)()
    finally:
        hooks.remove()
    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()]


@pytest.mark.parametrize("name", sorted(PIECES))
def test_each_branch_is_marked_once_per_piece_per_step_for_the_branch_that_made_it(name, tracer):
    model, inputs, analysis = _analysis(name, tracer)
    calls = call_map(model, analysis)
    assert calls.unseen == []
    names = [b.name for _r, b, _p in analysis.walk()]
    assert sorted(len(calls.pieces_of(n)) for n in names) == sorted(PIECES[name])
    opened: collections.Counter[str] = collections.Counter()
    closed: collections.Counter[str] = collections.Counter()
    with PieceHooks(model, calls, lambda p: opened.update([p.branch]), lambda p: closed.update([p.branch])) as hooks:
        for _ in range(3):
            _step(model, inputs)()
    assert hooks.steps == 3 and hooks.unmatched_steps == 0
    assert opened == closed == {n: 3 * len(calls.pieces_of(n)) for n in names}
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == 0


@pytest.mark.parametrize("name", sorted(PIECES))
def test_a_steps_branches_never_take_longer_than_the_step_and_the_bound_stays_between_1_and_k(name, tracer):
    model, inputs, analysis = _analysis(name, tracer)
    samples = measure_branch_times(model, analysis, _step(model, inputs), 6)
    assert samples is not None and len(samples.steps_ms) == 6
    top = {b.name for r, b, _p in analysis.walk() if r.depth == 0}
    for step_ms, branch_ms in zip(samples.steps_ms, samples.branch_ms, strict=True):
        assert set(branch_ms) == top
        assert sum(branch_ms[n] for n in top) <= step_ms + max(TOLERANCE_MS, 0.01 * step_ms)
    pred = predict_from([BranchRecord(**b) for b in analysis.to_json()], samples, source=FROM_MEASURED)
    assert pred is not None and pred.by_threads_ci95 is not None
    for k, bound in pred.by_threads.items():
        assert 1.0 <= bound <= int(k)
        lo, hi = pred.by_threads_ci95[k]
        assert 1.0 <= lo <= hi <= int(k)


def test_a_module_called_by_two_branches_is_credited_to_each_once():
    # Each branch of the Siamese net is one call of the encoder: a clock that ticks once per
    # reading gives each branch one tick, where timing from the encoder's hooks gave each both calls.
    model, inputs, analysis = _analysis("siamese", "torch.fx")
    ticks = iter(range(10_000))
    samples = measure_branch_times(model, analysis, _step(model, inputs), 3, clock=lambda: float(next(ticks)))
    assert samples is not None
    assert all(sorted(d.values()) == [1000.0, 1000.0] for d in samples.branch_ms)


def test_the_timeline_labels_each_piece_with_its_branch():
    model, inputs, analysis = _analysis("interleaved", "torch.fx")
    marks = sorted((s, e, name) for name, s, e in _profiled_step(model, inputs, analysis) if name.startswith("branch: "))
    # large (its input, x * 2.0), then small, large, small, large, small, large: one range per piece,
    # none overlapping the next
    assert [name for _s, _e, name in marks] == ["branch: large"] + ["branch: small", "branch: large"] * 3
    assert all(marks[i][1] <= marks[i + 1][0] for i in range(len(marks) - 1))


class _Program(nn.Module):
    """A model from a random program: regions of branches, each branch a chain of calls of modules
    drawn from a small pool (so branches and regions share modules), run one branch after another
    or interleaved call by call."""

    def __init__(self, program: list[tuple[list[list[int]], bool]], pool: int) -> None:
        super().__init__()
        self.pool = nn.ModuleList(nn.Linear(16, 16) for _ in range(pool))
        self.program = program

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for branches, interleave in self.program:
            values = [x * float(i + 1) for i in range(len(branches))]
            if interleave:
                for depth in range(max(len(b) for b in branches)):
                    for i, chain in enumerate(branches):
                        if depth < len(chain):
                            values[i] = torch.tanh(self.pool[chain[depth]](values[i]))
            else:
                for i, chain in enumerate(branches):
                    for m in chain:
                        values[i] = torch.tanh(self.pool[m](values[i]))
            x = torch.stack(values).sum(0)
        return x


_chains = st.lists(st.integers(0, 3), min_size=2, max_size=4)
_region = st.tuples(st.lists(_chains, min_size=2, max_size=3), st.booleans())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(_region, min_size=1, max_size=3))
def test_random_models_with_shared_modules_keep_the_invariants(program):
    torch.manual_seed(0)
    model = _Program(program, pool=4).eval()
    inputs = (torch.randn(4, 16),)
    analysis = find_branches(model, inputs)
    if not analysis.regions:
        return  # nothing the finder calls a branch: nothing to attribute
    calls = call_map(model, analysis)
    counts: collections.Counter[int] = collections.Counter()
    with PieceHooks(model, calls, lambda p: counts.update([p.index]), lambda p: None) as hooks:
        for _ in range(2):
            _step(model, inputs)()
    assert hooks.unmatched_steps == 0
    assert counts == {p.index: 2 for p in calls.pieces}  # every piece once per step
    samples = measure_branch_times(model, analysis, _step(model, inputs), 5)
    assert samples is not None
    top = {b.name for r, b, _p in analysis.walk() if r.depth == 0}
    for step_ms, branch_ms in zip(samples.steps_ms, samples.branch_ms, strict=True):
        assert sum(branch_ms.get(n, 0.0) for n in top) <= step_ms + max(TOLERANCE_MS, 0.01 * step_ms)
    pred = predict_from([BranchRecord(**b) for b in analysis.to_json()], samples, source=FROM_MEASURED)
    assert pred is not None
    assert all(1.0 <= v <= int(k) for k, v in pred.by_threads.items())


def test_a_function_at_a_pieces_edge_is_timed_with_it():
    # Inception's pool branch starts with F.avg_pool2d, outside every module call of its own: the
    # piece opens at the hook that fires just before it (the end of the branch before), so the
    # pooling, a large share of the block, is the branch's and not the serial part's.
    loaded = load_model(ModelSpec(demo="inception"))
    model, inputs = loaded.model, loaded.inputs
    events = _profiled_step(model, inputs, find_branches(model, inputs))
    pool = [(s, e) for name, s, e in events if name == "branch: branch_pool"]
    pooling = [(s, e) for name, s, e in events if name == "aten::avg_pool2d"]
    assert len(pool) == 1 and len(pooling) == 1
    assert pool[0][0] <= pooling[0][0] and pooling[0][1] <= pool[0][1]
    others = [(s, e) for name, s, e in events if name.startswith("branch: ") and name != "branch: branch_pool"]
    assert all(e <= pool[0][0] or s >= pool[0][1] for s, e in others)  # and no other branch's range holds it
