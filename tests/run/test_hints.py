"""Models the tracers cannot split, and what branchscope says about them: a mixture of experts gets a
hint for experts (Hugging Face's `experts_implementation`, else one path), a plain model branching on
values the torch.cond hint; fork's refusal of a torch.cond names threads mode; branches inside a
cond's paths are said to be unsearched."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import MixtralConfig, MixtralModel, Qwen2MoeConfig, Qwen2MoeModel

from branchscope.profiling.run.branch_pool import BranchPool
from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.graph_tracers import EXPORT_NON_STRICT, export_hint
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.modes import threads
from branchscope.profiling.run.plans import ModeUnavailable, build_plan, max_abs_diff
from tests.paths import MODELS

#: What torch.export says of a guard on a data-dependent value (the hints match on it).
DATA_DEPENDENT = "GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(u0, 0)"
TORCH_COND_HINT = "the model branches on tensor values: profile one path of it, or write the branch with torch.cond"


class TinyMoE(nn.Module):
    """A plain-torch mixture of experts: each token to the expert its router picks, in a loop over the
    experts whose index sets depend on the router's values."""

    def __init__(self, dim: int = 8, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            idx = torch.where(choice == e)[0]
            if idx.numel() == 0:
                continue
            out[idx] = expert(x[idx])
        return out


class OnePath(nn.Module):
    """Branches on a value with no experts anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) if x.sum() > 0 else x


class CondOfBranches(nn.Module):
    """A torch.cond whose first path holds two independent linears: a region, inside a path."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: self.a(t) + self.b(t), lambda t: self.c(t), (x,))


_TINY = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
    num_key_value_heads=2, num_experts_per_tok=2, max_position_embeddings=32, use_cache=False,
)  # fmt: skip


def _mixtral(implementation: str) -> nn.Module:
    torch.manual_seed(0)
    return MixtralModel(MixtralConfig(**_TINY, num_local_experts=4, experts_implementation=implementation)).eval()


def _qwen2_moe(implementation: str) -> nn.Module:
    torch.manual_seed(0)
    config = Qwen2MoeConfig(
        **_TINY, num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        experts_implementation=implementation,
    )  # fmt: skip
    return Qwen2MoeModel(config).eval()


def _ids() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {"input_ids": torch.randint(0, _TINY["vocab_size"], (1, 8))}


# ---------------------------------------------------------------- the hint fits the model


@pytest.mark.parametrize("build", [_mixtral, _qwen2_moe], ids=["mixtral", "qwen2-moe"])
def test_a_hugging_face_mixture_of_experts_looping_over_its_experts_is_told_to_group_them(build):
    analysis = find_branches(build("eager"), (), _ids())
    assert analysis.graph_module is None
    hint = analysis.fx_error.split(" — hint: ", 1)[1]
    assert 'experts_implementation="grouped_mm"' in hint and "profile one path" in hint
    assert "torch.cond" not in analysis.fx_error and "\n" not in analysis.fx_error
    assert all("grouped_mm" in analysis.tracer_errors[t] for t in (EXPORT_NON_STRICT, "torch.export (strict)"))


@pytest.mark.parametrize("build", [_mixtral, _qwen2_moe], ids=["mixtral", "qwen2-moe"])
def test_the_same_model_with_grouped_experts_exports_as_the_hint_says(build):
    model, ids = build("grouped_mm"), _ids()
    analysis = find_branches(model, (), ids)
    assert analysis.tracer == EXPORT_NON_STRICT and analysis.fx_error is None
    plan = build_plan("threads", model, analysis)
    with torch.no_grad():
        assert max_abs_diff(model(**ids), plan(**ids)) <= 1e-5


def test_a_grouped_hugging_face_mixture_branching_elsewhere_gets_the_plain_hint():
    # its experts already run grouped: the value it branches on is somewhere else
    assert export_hint(DATA_DEPENDENT, _mixtral("grouped_mm")) == TORCH_COND_HINT


def test_a_plain_mixture_of_experts_loop_is_told_of_one_path_or_fixed_shapes():
    analysis = find_branches(TinyMoE(), (torch.randn(6, 8),))
    assert analysis.graph_module is None
    hint = analysis.fx_error.split(" — hint: ", 1)[1]
    assert hint.startswith("the model routes its tokens to experts by tensor values") and "profile one path" in hint
    assert "torch.cond" not in hint and "experts_implementation" not in hint


def test_a_plain_model_branching_on_a_value_keeps_the_torch_cond_hint():
    analysis = find_branches(OnePath(), (torch.randn(6, 8),))
    assert analysis.fx_error.endswith(f" — hint: {TORCH_COND_HINT}")
    assert export_hint(DATA_DEPENDENT) == TORCH_COND_HINT  # no model given: the plain hint


# ---------------------------------------------------------------- torch.cond: fork names threads mode


@pytest.fixture(scope="module")
def pool():
    p = BranchPool(2)
    yield p
    p.shutdown()


def test_fork_refusing_a_torch_cond_names_threads_mode_which_runs_it(pool):
    loaded = load_model(ModelSpec(path=MODELS / "cond_branches.py"))
    analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs)
    with pytest.raises(ModeUnavailable) as refused:
        build_plan("fork", loaded.model, analysis)
    line = str(refused.value)
    assert line.startswith("fork mode: the graph torch.export (non-strict) gave calls torch.ops.higher_order.cond")
    assert line.endswith("run --mode threads, which runs it in eager PyTorch") and "\n" not in line
    plan = threads.build_plan(loaded.model, analysis, "cpu", pool=pool)
    with torch.no_grad():
        assert max_abs_diff(loaded.model(*loaded.inputs), plan(*loaded.inputs)) == 0.0


def test_fork_finding_no_branches_in_a_higher_order_graph_does_not_name_threads_mode():
    # threads mode needs branches too: naming it there would send the user to a second refusal
    loaded = load_model(ModelSpec(path=MODELS / "grad_wrapped.py"))
    analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs, grad=True)
    assert analysis.regions == []
    with pytest.raises(ModeUnavailable, match="found none worth a thread") as refused:
        build_plan("fork", loaded.model, analysis)
    assert "--mode threads" not in str(refused.value)


# ---------------------------------------------------------------- branches inside a cond's paths


def test_branches_inside_a_conds_paths_are_said_to_be_unsearched_and_why(pool):
    model, x = CondOfBranches(), torch.randn(4, 8)
    analysis = find_branches(model, (x,))
    assert analysis.tracer == EXPORT_NON_STRICT and analysis.regions == []
    (note,) = analysis.notes
    assert note.startswith("branches inside the paths of torch.cond (node cond) are not searched: ")
    assert "a plan launches branches only among that graph's own nodes" in note
    with pytest.raises(ModeUnavailable, match=r"found none worth a thread in this model \(branches inside the paths"):
        threads.build_plan(model, analysis, "cpu", pool=pool)


def test_a_cond_whose_paths_hold_one_op_each_gets_no_note():
    loaded = load_model(ModelSpec(path=MODELS / "cond_branches.py"))  # paths `t * 2` and `t - 1`
    analysis = find_branches(loaded.model, loaded.inputs, loaded.kwargs)
    assert analysis.notes == [] and [b.name for b in analysis.regions[0].branches] == ["a", "b"]
