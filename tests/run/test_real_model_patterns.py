"""What real models do that once kept them from forking, each in a small model file of our own
(tests/fixtures/models): a split's halves in branches (res2net, skresnet), a module under
`@torch.no_grad()` (Llama's rotary embedding), `torch._assert` in every norm layer (timm), a side
computation beside the whole network, a plan TorchScript cannot compile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from branchscope.profiling.run.branches import find_branches
from branchscope.profiling.run.graph_tracers import EXPORT_NON_STRICT, FX
from branchscope.profiling.run.model_source import ModelSpec, load_model
from branchscope.profiling.run.modes.fork import compiler_summary
from branchscope.profiling.run.plans import ModeUnavailable, build_plan, max_abs_diff
from tests.paths import MODELS, ROOT

BRANCHSCOPE = Path(ROOT / ".venv" / "bin" / "branchscope")


def _load(name: str):
    loaded = load_model(ModelSpec(path=MODELS / name))
    return loaded, find_branches(loaded.model, loaded.inputs, loaded.kwargs)


def _forked_matches(loaded, analysis) -> float:
    plan = build_plan("fork", loaded.model, analysis)
    assert isinstance(plan.module, torch.jit.ScriptModule)
    with torch.no_grad():
        return max_abs_diff(loaded.model(*loaded.inputs), plan(*loaded.inputs))


def test_branches_reading_the_halves_of_a_split_fork():
    loaded, analysis = _load("split_list.py")
    assert analysis.tracer == FX  # fx keeps torch.split's Python tuple; TorchScript's split gives a list
    (region,) = analysis.regions
    assert len(region.branches) == 2
    assert analysis.value_types[region.fork] == "List[Tensor]"
    assert _forked_matches(loaded, analysis) == 0.0


def test_a_module_under_no_grad_exports_without_a_grad_wrapper_and_forks():
    loaded, analysis = _load("grad_wrapped.py")
    assert analysis.tracer == EXPORT_NON_STRICT
    targets = {str(n.target) for n in analysis.graph_module.graph.nodes}
    assert not any("wrap_with_set_grad_enabled" in t for t in targets)
    (region,) = analysis.regions
    assert any("rotary" in b.name for b in region.branches)
    assert _forked_matches(loaded, analysis) == 0.0


def test_with_grad_on_the_wrapper_stays_and_the_error_says_what_to_do(monkeypatch):
    from branchscope.profiling.run import branch_regions

    # One wrapper call is little work beside the projections: keep its region whatever its size.
    monkeypatch.setattr(branch_regions, "SMALL_SHARE", 0.0)
    monkeypatch.setattr(branch_regions, "TINY_SHARE", 0.0)
    loaded = load_model(ModelSpec(path=MODELS / "grad_wrapped.py"))
    analysis = find_branches(loaded.model, loaded.inputs, grad=True)  # a run with a train_step
    with pytest.raises(ModeUnavailable) as err:
        build_plan("fork", loaded.model, analysis)
    message = str(err.value)
    assert "wrap_with_set_grad_enabled" in message and "switches autograd inside its forward" in message


def test_assertions_in_norm_layers_are_left_out_and_said():
    loaded, analysis = _load("asserting_norm.py")
    assert analysis.tracer == FX
    assert [len(r.branches) for r in analysis.regions] == [2, 2, 2]  # conv3 and conv1 of each block
    for _region, branch, _parent in analysis.walk():
        assert not any(str(getattr(n.target, "__name__", n.target)) == "_assert" for n in branch.nodes[:1])
        assert "_assert" not in branch.name
        assert branch.regions == []  # no norm's assertion nests a region inside a branch
    assert [x.kind for x in analysis.left_out] == ["assertion"] * 7  # the stem's norm and the six in blocks
    assert analysis.left_out[1].name == "blocks.0.norm3: eq → _assert"
    assert _forked_matches(loaded, analysis) == 0.0  # the assertions still run, outside any branch


class _WithSideStatistic(nn.Module):
    """A whole network beside one statistic of its input: no region of two, but the network's own."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(16, 64)
        self.left = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
        self.right = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
        self.head = nn.Linear(64, 16)

    def forward(self, x):
        scale = x.abs().amax()
        h = self.stem(x)
        return self.head(self.left(h) + self.right(h)) * scale


def test_a_whole_network_is_no_branch_beside_a_small_side_computation():
    analysis = find_branches(_WithSideStatistic().eval(), (torch.randn(32, 16),))
    (region,) = analysis.regions  # left and right, at the top: not nested inside "the network"
    assert [b.name for b in region.branches] == ["left", "right"] and region.depth == 0
    (small,) = analysis.left_out
    assert small.kind == "small" and small.name.startswith("abs → amax") and "not worth a thread" in small.why


def test_compiler_summary_keeps_the_cause_after_the_signature_line():
    message = (
        "_branch0(__torch__.P self, (Tensor, Tensor) v_split) -> ((Tensor)):\n"
        "Expected a value of type 'Tuple[Tensor, Tensor]' for argument 'v_split' but instead found type 'List[Tensor]'.\n"
        "Inferred 'v_split' to be of type 'Tuple[Tensor, Tensor]' because it was annotated as such.\n"
        ":\n"
        '  File "<branchscope-fork-plan-P>", line 9\n'
        "        _fut0 = torch.jit.fork(self._branch0, v_split)\n"
        "                ~~~~~~~~~~~~~~ <--- HERE\n"
    )
    summary = compiler_summary(message)
    assert "found type 'List[Tensor]'" in summary and "\n" not in summary
    assert "(at " not in summary  # the plan's own source is no place a user can open
    lam = compiler_summary("Lambda aren't supported:\n  File \"/m/model.py\", line 5\n    f = lambda t: t\n")
    assert lam == "Lambda aren't supported (at /m/model.py, line 5)"


def _profile(out: Path, model: str, mode: str = "fork") -> subprocess.CompletedProcess[str]:
    interop = "2" if mode == "fork" else "1"
    cmd = [str(BRANCHSCOPE), "profile", "--model", str(MODELS / model), "--mode", mode, "--interop", interop,
           "--intra", "1", "--steps", "1", "--warmup", "0", "--out", str(out)]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_plan_that_does_not_compile_is_kept_with_the_whole_message(tmp_path):
    out = tmp_path / "run"
    proc = _profile(out, "uncompilable_plan.py")
    assert proc.returncode == 3, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    failed = out / "failed-run"
    assert "Lambda aren't supported" in line and "uncompilable_plan.py, line " in line
    assert str(failed / "plan.py") in line and str(failed / "plan-error.txt") in line
    assert "def _branch0(" in (failed / "plan.py").read_text()
    whole = (failed / "plan-error.txt").read_text()
    assert whole.startswith("UnsupportedNodeError") and "<--- HERE" in whole
    record = json.loads((failed / "failure.json").read_text())
    assert record["files"] == ["plan.py", "plan-error.txt"] and record["message"] in line
    assert sorted(p.name for p in out.iterdir()) == ["failed-run"]  # no run results claimed

    # The folder stays usable: a run that works takes it, and removes the failure it no longer has.
    ok = _profile(out, "split_list.py")
    assert ok.returncode == 0, ok.stderr
    assert not failed.exists() and (out / "run.json").is_file()


@pytest.mark.slow
def test_a_failed_run_folder_that_is_not_ours_is_never_touched(tmp_path):
    out = tmp_path / "run"
    (out / "failed-run").mkdir(parents=True)
    mine = out / "failed-run" / "plan.py"
    mine.write_text("# the user's own file\n")
    proc = _profile(out, "uncompilable_plan.py")
    assert proc.returncode == 2 and "failed-run" in proc.stderr  # refused: it holds files not ours
    proc = subprocess.run(
        [str(BRANCHSCOPE), "profile", "--model", str(MODELS / "uncompilable_plan.py"), "--mode", "fork",
         "--interop", "2", "--intra", "1", "--steps", "1", "--warmup", "0", "--out", str(out), "--overwrite"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 3 and "see " not in proc.stderr.splitlines()[-1]
    assert mine.read_text() == "# the user's own file\n"


class _PoolBesideATree(nn.Module):
    """dla34's shape: a max-pool downsample beside the block it skips, nothing else parallel."""

    def __init__(self):
        super().__init__()
        self.tree = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.downsample = nn.MaxPool2d(1)

    def forward(self, x):
        return self.tree(x) + self.downsample(x)


def test_fork_says_what_was_left_out_when_nothing_is_worth_a_thread():
    model = _PoolBesideATree().eval()
    analysis = find_branches(model, (torch.randn(1, 8, 16, 16),))
    assert analysis.regions == [] and [x.name for x in analysis.left_out] == ["downsample"]
    with pytest.raises(ModeUnavailable) as err:
        build_plan("fork", model, analysis)
    assert "none worth a thread" in str(err.value)
    assert "left out: 1 branch too small beside its region's largest" in str(err.value)
