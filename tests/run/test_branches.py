"""Branch discovery with torch.fx: fork-join regions, nesting, two towers, names, and fx failures."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.model_source import ModelSpec, load_model


def _analyse_demo(name):
    loaded = load_model(ModelSpec(demo=name))
    return find_branches(loaded.model, loaded.inputs)


def test_inception_has_four_branches_named_from_modules():
    analysis = _analyse_demo("inception")
    assert analysis.fx_error is None
    assert len(analysis.regions) == 1
    region = analysis.regions[0]
    assert [b.name for b in region.branches] == [
        "branch1x1",
        "branch5x5_1 → branch5x5_2",
        "branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3",
        "branch_pool",
    ]
    assert region.fork == "x" and region.join == "cat"
    assert [b.ops for b in region.branches] == [3, 6, 9, 4]
    assert all(not b.regions for b in region.branches)


def test_lstm_ensemble_members_with_nested_directions():
    analysis = _analyse_demo("lstm-ensemble")
    (top,) = analysis.regions
    assert [b.name for b in top.branches] == ["members.0", "members.1", "members.2", "members.3"]
    for k, member in enumerate(top.branches):
        (inner,) = member.regions
        assert inner.id == f"1.{k + 1}" and inner.depth == 1
        assert [b.name for b in inner.branches] == [f"members.{k}.fwd", f"members.{k}.bwd"]
    rows = analysis.to_json()
    assert len(rows) == 12
    assert {r["parent"] for r in rows if r["depth"] == 1} == {f"members.{k}" for k in range(4)}
    assert all(set(r) >= {"name", "region", "ops"} for r in rows)


class _TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        self.item = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        self.head = nn.Linear(8, 1)

    def forward(self, u, i):
        return self.head(torch.cat([self.user(u), self.item(i)], 1))


def test_two_tower_branches_start_from_different_inputs():
    analysis = find_branches(_TwoTower(), (torch.randn(2, 8), torch.randn(2, 8)))
    (region,) = analysis.regions
    assert [b.name for b in region.branches] == ["user", "item"]
    assert region.fork == "u, i"


class _SplitInsideBranch(nn.Module):
    """InceptionE-like: inside one branch, one value feeds two sub-branches that are concatenated."""

    def __init__(self):
        super().__init__()
        self.left = nn.Conv2d(4, 4, 1)
        self.stem = nn.Conv2d(4, 4, 1)
        self.sub_a = nn.Conv2d(4, 4, (1, 3), padding=(0, 1))
        self.sub_b = nn.Conv2d(4, 4, (3, 1), padding=(1, 0))

    def forward(self, x):
        left = self.left(x)
        s = F.relu(self.stem(x))
        right = torch.cat([self.sub_a(s), self.sub_b(s)], 1)
        return torch.cat([left, right], 1)


def test_region_nested_inside_a_branch_from_a_value_of_that_branch():
    analysis = find_branches(_SplitInsideBranch(), (torch.randn(1, 4, 5, 5),))
    (top,) = analysis.regions
    assert [b.name for b in top.branches] == ["left", "stem → sub_a → sub_b"]
    (nested,) = top.branches[1].regions
    assert nested.id == "1.1" and nested.fork == "relu"
    assert [b.name for b in nested.branches] == ["sub_a", "sub_b"]


class _TwoLinears(nn.Module):
    """Two layers, `a` and `b`, each Linear(8, 8): the small models below differ only in their forward."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)


class _Residual(_TwoLinears):
    def forward(self, x):
        return F.relu(self.a(x)) + x


def test_skip_connection_is_not_a_region():
    assert find_branches(_Residual(), (torch.randn(2, 8),)).regions == []


class _Bookkeeping(_TwoLinears):
    def forward(self, x):
        n = x.size(0)  # a chain of its own, but no work
        return (self.a(x) + self.b(x)).view(n, -1)


def test_bookkeeping_chains_are_not_branches():
    (region,) = find_branches(_Bookkeeping(), (torch.randn(2, 8),)).regions
    assert [b.name for b in region.branches] == ["a", "b"]


class _WritesSharedInput(_TwoLinears):
    def forward(self, x):
        y = self.a(x)
        z = x.mul_(2)  # writes the value the other branch reads
        return y + z


def test_branch_writing_its_shared_input_in_place_is_not_parallel():
    analysis = find_branches(_WritesSharedInput(), (torch.randn(2, 8),))
    assert analysis.regions == []
    assert any("in place" in note for note in analysis.notes)


class _DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def test_fx_failure_says_why():
    analysis = find_branches(_DataDependent(), (torch.randn(3),))
    assert analysis.graph_module is None and analysis.regions == []
    assert "torch.fx could not trace _DataDependent" in analysis.fx_error
    assert "control flow" in analysis.fx_error


def test_torchscript_module_is_reported_not_traced():
    scripted = torch.jit.script(_Residual())
    analysis = find_branches(scripted, (torch.randn(2, 8),))
    assert analysis.regions == [] and "TorchScript" in analysis.fx_error


def test_branch_names_are_unique_across_regions():
    class TwoBlocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(_TwinBlock() for _ in range(2))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    analysis = find_branches(TwoBlocks(), (torch.randn(2, 8),))
    names = [b["name"] for b in analysis.to_json()]
    assert len(analysis.regions) == 2
    assert names == ["blocks.0.a", "blocks.0.b", "blocks.1.a", "blocks.1.b"]


class _TwinBlock(_TwoLinears):
    def forward(self, x):
        return self.a(x) * self.b(x)


class _NeedsExport(nn.Module):
    """Makes a tensor of the input's size and writes into it (fx cannot trace either) and builds a
    position index (integer tensors: bookkeeping) before two projections of one input."""

    def __init__(self):
        super().__init__()
        self.left = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.right = nn.Linear(8, 8)

    def forward(self, x):
        scale = torch.ones(x.shape[0], 8)
        scale[0] = 2.0
        positions = torch.arange(x.shape[1]) + 1
        x = x * scale + positions
        return self.left(x) * self.right(x)


def test_torch_export_takes_over_when_fx_fails_and_names_come_from_module_paths():
    from branchscope.profiling.run.graph_tracers import EXPORT_NON_STRICT, FX

    analysis = find_branches(_NeedsExport(), (torch.randn(3, 8),))
    assert analysis.tracer == EXPORT_NON_STRICT and analysis.exported and analysis.fx_error is None
    assert list(analysis.tracer_errors) == [FX]
    assert analysis.tracer_errors[FX].startswith("torch.fx could not trace _NeedsExport: TypeError: ")
    (region,) = analysis.regions  # the position index is no branch of its own
    assert [b.name for b in region.branches] == ["left", "right"]
    assert [len(b.nodes) for b in region.branches] == [2, 1]  # aten.linear, aten.relu; aten.linear
    assert region.join == "mul_1"
    # `scale[0] = 2.0` writes through a view into `scale`, which the rest reads: no branch of its own
    assert any(note.startswith("not parallel: fill_ writes in place into ones") for note in analysis.notes)
    # the position index is bookkeeping (an integer tensor): no branch, and nothing a user would miss
    assert analysis.left_out == []


def test_elementwise_chains_of_an_exported_graph_are_no_branches():
    class Gelu(nn.Module):  # the tanh GELU written out, as GPT-2 does
        def forward(self, x):
            scale = torch.ones(x.shape[0], 1)
            scale[0] = 2.0
            x = x * scale
            return 0.5 * x * (1.0 + torch.tanh(0.79788 * (x + 0.044715 * torch.pow(x, 3.0))))

    analysis = find_branches(Gelu(), (torch.randn(3, 8),))
    assert analysis.tracer is not None and analysis.tracer != "torch.fx"
    assert analysis.regions == []


def test_no_graph_at_all_says_why_for_every_tracer():
    analysis = find_branches(_DataDependent(), (torch.randn(3),))
    assert list(analysis.tracer_errors) == ["torch.fx", "torch.export (non-strict)", "torch.export (strict)"]
    assert "(hint: the model branches on tensor values" in analysis.tracer_errors["torch.export (non-strict)"]
    assert "; nor could torch.export (non-strict: " in analysis.fx_error and "\n" not in analysis.fx_error
