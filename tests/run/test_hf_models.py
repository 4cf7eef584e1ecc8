"""Hugging Face models through torch.export: small random BERT, ViT and GPT-2 built from configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.graph_tracers import EXPORT_NON_STRICT, FX
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.plans import ModeUnavailable, build_plan, max_abs_diff
from tests.paths import MODELS
from tests.run.profiled_plans import branch_labels_in_trace

BRANCHSCOPE = Path(sys.executable).parent / "branchscope"

#: The query, key and value projections of each of the two layers, by the module path they run in.
QKV = {
    "hf_bert.py": [f"encoder.layer.{k}.attention.self.{p}" for k in range(2) for p in ("query", "key", "value")],
    "hf_vit.py": [f"layers.{k}.attention.{p}_proj" for k in range(2) for p in ("q", "k", "v")],
}


def _prepare(name):
    loaded = load_model(ModelSpec(path=MODELS / name))
    return loaded, find_branches(loaded.model, loaded.inputs, loaded.kwargs)


def _outputs(fn, loaded):
    with torch.no_grad():
        return fn(*loaded.inputs, **loaded.kwargs)


@pytest.mark.parametrize("name", sorted(QKV))
def test_export_finds_the_qkv_region_of_every_layer(name):
    loaded, analysis = _prepare(name)
    assert loaded.kwargs and not loaded.inputs  # keyword inputs (input_ids=..., pixel_values=...)
    assert analysis.tracer == EXPORT_NON_STRICT and analysis.fx_error is None
    assert "Proxy" in analysis.tracer_errors[FX] and "could not trace" in analysis.tracer_errors[FX]
    for layer in (0, 1):
        names = QKV[name][3 * layer : 3 * layer + 3]
        regions = [r for r in analysis.regions if [b.name for b in r.branches] == names]
        assert len(regions) == 1, [[b.name for b in r.branches] for r in analysis.regions]
        assert regions[0].join.startswith("scaled_dot_product_attention")


@pytest.mark.parametrize("name", sorted(QKV))
def test_fork_plan_from_the_exported_graph_gives_the_models_outputs(name):
    loaded, analysis = _prepare(name)
    plan = build_plan("fork", loaded.model, analysis)
    assert isinstance(plan.module, torch.jit.ScriptModule)
    assert plan.source.count("torch.jit.fork(") == len(analysis.to_json())
    expected, actual = _outputs(loaded.model, loaded), _outputs(plan, loaded)
    assert type(actual) is type(expected)  # the ModelOutput, nested back from the graph's flat outputs
    assert actual.last_hidden_state.shape == expected.last_hidden_state.shape
    assert max_abs_diff(expected, actual) <= 1e-4


@pytest.mark.parametrize("mode", ["sequential", "fork"])
def test_bert_trace_carries_the_branch_labels(mode, tmp_path):
    loaded, analysis = _prepare("hf_bert.py")
    plan = build_plan(mode, loaded.model, analysis)
    trace, assignment = branch_labels_in_trace(plan, loaded, tmp_path)
    assert set(QKV["hf_bert.py"]) <= set(assignment.names)
    linears = [i for i in range(len(trace)) if trace.event_name(i) == "aten::linear"]
    query = assignment.names.index("encoder.layer.0.attention.self.query")
    assert sum(1 for i in linears if assignment.event_branch[i] == query) == 1  # its one projection


def test_gpt2_without_cache_exports_and_its_fused_qkv_is_no_region():
    loaded, analysis = _prepare("hf_gpt2.py")
    assert analysis.tracer == EXPORT_NON_STRICT
    names = [row["name"] for row in analysis.to_json()]
    assert names == ["wte", "wpe"]  # token and position embeddings; c_attn makes q, k and v in one product
    plan = build_plan("fork", loaded.model, analysis)
    assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) <= 1e-4


def test_gpt2_with_its_cache_fails_to_export_with_a_hint():
    loaded, analysis = _prepare("hf_gpt2_cache.py")
    assert analysis.graph_module is None and analysis.tracer is None
    assert set(analysis.tracer_errors) == {FX, EXPORT_NON_STRICT, "torch.export (strict)"}
    assert "DynamicCache" in analysis.tracer_errors[EXPORT_NON_STRICT]
    assert "\n" not in analysis.fx_error and analysis.fx_error.startswith("torch.fx could not trace GPT2Model")
    assert analysis.fx_error.endswith("hint: set `use_cache=False` in the model's config")
    with pytest.raises(ModeUnavailable, match="use_cache=False"):
        build_plan("fork", loaded.model, analysis)
    assert build_plan("sequential", loaded.model, analysis).module is loaded.model


def test_exported_graph_a_torchscript_plan_cannot_call_is_refused_saying_why():
    loaded, analysis = _prepare("cond_branches.py")
    assert analysis.tracer == EXPORT_NON_STRICT and [b.name for b in analysis.regions[0].branches] == ["a", "b"]
    with pytest.raises(ModeUnavailable, match=r"torch\.ops\.higher_order\.cond .*TorchScript plan cannot call"):
        build_plan("fork", loaded.model, analysis)


# ---------------------------------------------------------------- the command line, as a user runs it


def _profile(tmp_path: Path, model: str, mode: str) -> subprocess.CompletedProcess[str]:
    interop = "2" if mode == "fork" else "1"
    cmd = [str(BRANCHSCOPE), "profile", "--model", str(MODELS / model), "--mode", mode, "--interop", interop,
           "--intra", "1", "--steps", "2", "--warmup", "1", "--out", str(tmp_path / "run")]  # fmt: skip
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["hf_bert.py", "hf_vit.py"])
def test_profile_fork_runs_the_qkv_regions_forked(tmp_path, model):
    proc = _profile(tmp_path, model, "fork")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["tracer"] == EXPORT_NON_STRICT and run["fx_error"] is None
    assert set(run["tracer_errors"]) == {FX}
    assert set(QKV[model]) <= {b["name"] for b in run["branches"]}
    assert run["max_abs_diff"] <= 1e-4
    assert "torch.jit.fork(" in (tmp_path / "run" / "plan.py").read_text()
    assert f"{QKV[model][0]} (3 ops)" in proc.stdout


@pytest.mark.slow
def test_profile_gpt2_runs_sequentially_and_says_what_was_found(tmp_path):
    proc = _profile(tmp_path, "hf_gpt2.py", "sequential")
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["tracer"] == EXPORT_NON_STRICT and [b["name"] for b in run["branches"]] == ["wte", "wpe"]
    assert "branches: 2 in 1 region(s)" in proc.stdout


@pytest.mark.slow
def test_profile_fork_of_an_unplannable_export_exits_3(tmp_path):
    proc = _profile(tmp_path, "cond_branches.py", "fork")
    assert proc.returncode == 3
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: fork mode: the graph torch.export (non-strict) gave calls torch.ops.higher_order.cond")


@pytest.mark.slow
def test_llama_forks_its_qkv_projections_with_the_no_grad_rotary_embedding():
    loaded, analysis = _prepare("hf_llama.py")
    assert analysis.tracer == EXPORT_NON_STRICT
    qkv = [[b.name.rsplit(".", 1)[-1] for b in r.branches] for r in analysis.regions if len(r.branches) == 3]
    assert qkv == [["q_proj", "k_proj", "v_proj"]] * 2  # one region per layer
    plan = build_plan("fork", loaded.model, analysis)
    assert "higher_order" not in plan.source
    assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) <= 1e-4


@pytest.mark.slow
def test_t5_forks_its_encoder_beside_the_decoder():
    loaded, analysis = _prepare("hf_t5.py")
    (top,) = [r for r in analysis.regions if r.depth == 0 and len(r.branches) == 2]
    modules = [{m.split(".")[0] for n in b.nodes for m in _module_paths(n)} for b in top.branches]
    assert any("encoder" in m for m in modules) and all("decoder" in m for m in modules)
    plan = build_plan("fork", loaded.model, analysis)
    assert max_abs_diff(_outputs(loaded.model, loaded), _outputs(plan, loaded)) <= 1e-4


def _module_paths(node):
    return [v[0] for v in (node.meta.get("nn_module_stack") or {}).values() if isinstance(v, tuple) and v[0]]
