"""Model sources: .py files, TorchScript archives and demos; clear errors naming what is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from branchscope.profiling.run.model_source import (
    DemoUnavailableError,
    ModelCodeError,
    ModelSourceError,
    ModelSpec,
    check_spec,
    list_demos,
    load_model,
    parse_input_shape,
)
from tests.paths import MODELS, ROOT

CPU_DEMOS = ["attention-qkv", "ddp-gather-loss", "ddp-local-loss", "inception", "lstm-ensemble", "twin-mm"]


def test_list_demos_names_descriptions_and_requirements():
    demos = {d.name: d for d in list_demos()}
    assert sorted(demos) == [
        "attention-qkv", "dataparallel-balanced", "dataparallel-imbalance", "ddp-gather-loss", "ddp-local-loss",
        "inception", "lstm-ensemble", "small-ops", "twin-mm", "two-towers",
    ]  # fmt: skip
    assert demos["dataparallel-balanced"].requires_cuda_devices == 2
    for demo in demos.values():
        assert demo.path.is_file() and demo.path.suffix == ".py"
        assert len(demo.description) > 20 and "\n" not in demo.description
    assert demos["dataparallel-imbalance"].requires_cuda_devices == 2
    assert demos["inception"].requires_cuda_devices == 0


def test_list_demos_and_checks_do_not_import_torch():
    code = (
        "import sys; from branchscope.profiling.run.model_source import list_demos, check_spec, ModelSpec;"
        "list_demos(); check_spec(ModelSpec(demo='twin-mm'));"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("text", "shape"), [("8x64x35x35", (8, 64, 35, 35)), ("3", (3,)), ("2,5", (2, 5)), (" 4X7 ", (4, 7))]
)
def test_parse_input_shape(text, shape):
    assert parse_input_shape(text) == shape


@pytest.mark.parametrize("text", ["", "8xx", "8x-1", "axb", "0x3"])
def test_parse_input_shape_rejects(text):
    with pytest.raises(ModelSourceError, match="--input-shape"):
        parse_input_shape(text)


def test_check_spec_errors_name_the_problem(tmp_path):
    with pytest.raises(ModelSourceError, match="exactly one of --demo"):
        check_spec(ModelSpec())
    with pytest.raises(ModelSourceError, match="no demo named 'nope'.*twin-mm"):
        check_spec(ModelSpec(demo="nope"))
    with pytest.raises(ModelSourceError, match="does not exist"):
        check_spec(ModelSpec(path=tmp_path / "missing.py"))
    with pytest.raises(ModelSourceError, match="--input-shape is for TorchScript archives"):
        check_spec(ModelSpec(path=MODELS / "two_tower.py", input_shapes=((2, 3),)))
    archive = tmp_path / "m.pt"
    archive.write_bytes(b"PK\x03\x04")
    with pytest.raises(ModelSourceError, match="TorchScript archive.*--input-shape"):
        check_spec(ModelSpec(path=archive))
    with pytest.raises(ModelSourceError, match="--dtype 'float7'"):
        check_spec(ModelSpec(demo="twin-mm", dtype="float7"))


def test_missing_build_model_is_named():
    with pytest.raises(ModelSourceError, match=r"no_build_model.py defines no build_model\(\)"):
        load_model(ModelSpec(path=MODELS / "no_build_model.py"))
    with pytest.raises(ModelSourceError, match=r"neither build_model\(\) nor example_inputs\(\)"):
        load_model(ModelSpec(path=MODELS / "empty_model.py"))


def test_build_model_raising_carries_the_model_traceback():
    with pytest.raises(ModelCodeError, match="build_model.. raised RuntimeError: weights file missing") as info:
        load_model(ModelSpec(path=MODELS / "raises_in_build.py"))
    tb = info.value.model_traceback
    assert "raises_in_build.py" in tb and 'raise RuntimeError("weights file missing' in tb
    assert "model_source.py" not in tb  # branchscope's own frames are left out


def test_sys_exit_in_build_model_is_a_model_error_not_an_exit(tmp_path):
    with pytest.raises(ModelCodeError, match=r"build_model\(\) raised SystemExit \(sys.exit\(3\)\)") as info:
        load_model(ModelSpec(path=MODELS / "exits_in_build.py"))
    assert "exits_in_build.py" in info.value.model_traceback
    at_import = tmp_path / "exits_at_import.py"
    at_import.write_text("import sys\nsys.exit('no weights')\n")
    with pytest.raises(ModelCodeError, match=r"importing exits_at_import.py raised SystemExit"):
        load_model(ModelSpec(path=at_import))


def test_py_model_loads_in_eval_mode_with_all_inputs():
    loaded = load_model(ModelSpec(path=MODELS / "two_tower.py"))
    assert loaded.kind == "py" and not loaded.model.training
    assert [tuple(t.shape) for t in loaded.inputs] == [(8, 32), (8, 32)]


_TWO_INPUTS = """
import torch
from torch import nn


class Net(nn.Module):
    def forward(self, user, item=None):
        return user if item is None else user + item


def build_model():
    return Net()


def example_inputs():
    return {returns}
"""


@pytest.mark.parametrize(
    ("returns", "args", "kwargs"),
    [
        ("(torch.ones(2), torch.ones(2))", 2, []),  # positional arguments
        ("torch.ones(2)", 1, []),  # one tensor: one positional argument
        ("[torch.ones(2), torch.ones(2)]", 2, []),
        ("{'user': torch.ones(2), 'item': torch.ones(2)}", 0, ["user", "item"]),  # keyword arguments
        ("((torch.ones(2),), {'item': torch.ones(2)})", 1, ["item"]),  # both, as a pair
    ],
)
def test_example_inputs_are_positional_keyword_or_both(tmp_path, returns, args, kwargs):
    path = tmp_path / "net.py"
    path.write_text(_TWO_INPUTS.format(returns=returns))
    loaded = load_model(ModelSpec(path=path))
    assert len(loaded.inputs) == args and list(loaded.kwargs) == kwargs
    assert len(loaded.tensors()) == args + len(kwargs)
    assert loaded.model(*loaded.inputs, **loaded.kwargs).shape == (2,)


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        ("'x'", "returned str; it must return a tuple .positional arguments., a dict .keyword arguments. or a pair"),
        ("{1: torch.ones(2)}", "returned a dict whose keys are not argument names: 1"),
    ],
)
def test_example_inputs_of_another_kind_are_refused_naming_it(tmp_path, returns, message):
    path = tmp_path / "net.py"
    path.write_text(_TWO_INPUTS.format(returns=returns))
    with pytest.raises(ModelSourceError, match=f"example_inputs.. in net.py {message}"):
        load_model(ModelSpec(path=path))


def test_torchscript_archive_with_shapes_and_dtype(tmp_path):
    import torch

    loaded = load_model(ModelSpec(path=MODELS / "two_tower.py"))
    archive = tmp_path / "two_tower.pt"
    torch.jit.save(torch.jit.script(loaded.model), str(archive))
    ts = load_model(ModelSpec(path=archive, input_shapes=((4, 32), (4, 32)), dtype="float64"))
    assert ts.kind == "torchscript" and ts.is_scripted
    assert [tuple(t.shape) for t in ts.inputs] == [(4, 32), (4, 32)]
    assert all(t.dtype == torch.float64 for t in ts.inputs)
    with torch.no_grad():
        out = ts.model.double()(*ts.inputs)
    assert tuple(out.shape) == (4, 1)


def test_not_an_archive_is_reported(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a zip at all")
    with pytest.raises(ModelSourceError, match="not a loadable TorchScript archive"):
        load_model(ModelSpec(path=bad, input_shapes=((2,),)))


@pytest.mark.parametrize("name", ["dataparallel-imbalance", "dataparallel-balanced"])
def test_dataparallel_demo_says_it_needs_two_gpus(name):
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has 2 CUDA devices")
    with pytest.raises(DemoUnavailableError, match="needs at least 2 CUDA devices"):
        load_model(ModelSpec(demo=name))


def test_dataparallel_training_steps_give_the_same_loss_whether_the_loss_is_gathered_or_per_replica():
    """Both demos' steps on the CPU (DataParallel runs the module itself without GPUs): forward, loss,
    backward under the worker's no_grad; only where the loss is computed differs, not its value."""
    import torch

    from branchscope.assets.demos import dataparallel_balanced as balanced
    from branchscope.assets.demos import dataparallel_imbalance as imbalance

    torch.manual_seed(0)
    net = imbalance.Net(width=32, classes=50, depth=2)
    x, target = torch.randn(16, 32), torch.randint(0, 50, (16,))
    with torch.no_grad():
        gathered = imbalance.TrainStep(net, None)(x, target)
        per_replica = balanced.BalancedTrainStep(net, None)(x, target)
    assert gathered.ndim == 0 and torch.isfinite(gathered)
    assert torch.allclose(gathered, per_replica)
    assert all(p.grad is None for p in net.parameters())  # gradients cleared after each step


@pytest.mark.parametrize("name", CPU_DEMOS)
def test_cpu_demos_build_and_run(name):
    import torch

    loaded = load_model(ModelSpec(demo=name))
    assert loaded.kind == "demo"
    with torch.no_grad():
        out = loaded.model(*loaded.inputs)
    assert isinstance(out, torch.Tensor) and torch.isfinite(out).all()


def test_train_step_is_found_with_the_inputs_as_example_inputs_returned(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(
        _TWO_INPUTS.format(returns="(torch.ones(2), torch.ones(2))")
        + "\n\ndef train_step(model, inputs):\n    return model(*inputs).sum()\n"
    )
    loaded = load_model(ModelSpec(path=path))
    assert loaded.train_step is not None
    assert isinstance(loaded.example, tuple) and len(loaded.example) == 2
    assert float(loaded.train_step(loaded.model, loaded.example)) == 4.0
    without = tmp_path / "plain.py"
    without.write_text(_TWO_INPUTS.format(returns="torch.ones(2)") + "\ntrain_step = 'not callable'\n")
    assert load_model(ModelSpec(path=without)).train_step is None


def test_ddp_demos_in_one_process_step_alike_whichever_rank_computes_the_loss():
    """Without a process group both demos train on their own batch: one rank gathering every rank's
    logits is then the rank's own loss, so one step moves the weights the same way."""
    import torch

    from branchscope.assets.demos import ddp_gather_loss as gather
    from branchscope.assets.demos import ddp_local_loss as local

    weights = []
    for name in ("ddp-local-loss", "ddp-gather-loss"):
        loaded = load_model(ModelSpec(demo=name))
        assert loaded.train_step is not None
        loaded.train_step(loaded.model, loaded.example)
        weights.append(loaded.model.head.weight.detach().clone())
    torch.manual_seed(0)
    assert not torch.equal(weights[0], local.Net().head.weight)  # a step was taken (build_model seeds 0)
    assert gather.WIDTH == local.WIDTH and gather.CLASSES == local.CLASSES
    assert torch.allclose(weights[0], weights[1], atol=1e-6)
