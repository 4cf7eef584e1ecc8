"""`--python PATH`: the worker under another interpreter (the user's environment), which does not have
branchscope installed; the runner probes it first and refuses it in one line, before OUT is touched.

The other environments are made here: `python -m venv --without-pip` in tmp_path, bare (no torch), or
sharing this environment's site-packages through a path line in a .pth file (torch, msgspec, psutil and
numpy come from there, branchscope does not: the editable install's own .pth is not processed through a
path line). The probe's answers are also faked by shell scripts, to check each message without torch.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from branchscope.app import cmd_profile
from branchscope.profiling.run import interpreter
from branchscope.profiling.run.interpreter import BOOTSTRAP, InterpreterError, check, locate, package_root
from branchscope.profiling.run.launch import launcher_command, worker_command
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import RunRequest, add_run_arguments, request_from_args
from branchscope.profiling.run.runner import run_profile
from branchscope.profiling.run.sweep import SweepRequest, run_sweep
from branchscope.profiling.trace.records import read_run_record

_MODEL = """
import os, sys
from pathlib import Path

import torch


def build_model():
    rank = os.environ.get("RANK", "0")
    Path(__file__).with_name(f"ran-under-{rank}.txt").write_text(sys.executable + "\\n" + sys.prefix)
    return torch.nn.Linear(4, 4)


def example_inputs():
    return (torch.randn(2, 4),)
"""


def _venv(folder: Path, *, share: bool) -> Path:
    """A venv at `folder` made from this interpreter's base; `share`: this environment's site-packages
    on its path (a .pth path line). Returns its bin/python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True, timeout=120)
    python = folder / "bin" / "python"
    if share:
        purelib = Path(subprocess.run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      check=True, capture_output=True, text=True, timeout=60).stdout.strip())  # fmt: skip
        (purelib / "shared-with-branchscope.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A Python with the standard library only: no torch, msgspec, psutil or numpy."""
    return _venv(tmp_path_factory.mktemp("bare") / "venv", share=False)


@pytest.fixture(scope="module")
def user_python(tmp_path_factory) -> Path:
    """Another environment with this one's torch and the worker's needs, but no branchscope."""
    return _venv(tmp_path_factory.mktemp("user") / "venv", share=True)


def _request(out: Path, python: Path | None, **options) -> RunRequest:
    return RunRequest(mode="sequential", interop=1, intra=1, out=out,
                      options=RunOptions(demo="twin-mm", steps=2, warmup=1, python=python, **options))  # fmt: skip


def _fake_python(tmp_path: Path, answer: str, *, name: str = "python") -> Path:
    """An executable that answers the probe with `answer` (a JSON object) whatever it is asked."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho 'importing torch printed this'\ncat <<'EOF'\nbranchscope-probe: {answer}\nEOF\n")
    path.chmod(0o755)
    return path



def _refusal(tmp_path: Path, answer: str) -> tuple[Path, str]:
    """A fake Python answering the probe with `answer`, and the line `interpreter.check` refuses it with."""
    python = _fake_python(tmp_path, answer)
    with pytest.raises(InterpreterError) as err:
        check(python)
    return python, str(err.value)

# ---- the option ------------------------------------------------------------------------------


def test_python_is_a_runner_option_the_worker_never_gets(tmp_path):
    python = tmp_path / "env" / "bin" / "python"
    req = _request(tmp_path / "out", python)
    argv = req.argv()
    assert argv[argv.index("--python") + 1] == str(python)
    assert "--python" not in req.argv(worker=True)
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    assert request_from_args(parser.parse_args(argv)).options.python == python
    assert "--python" not in _request(tmp_path / "out", None).argv()  # the default: left out
    # Another torch measures differently: its runs are not compared with branchscope's own.
    assert req.options.model_key != req.options.replace(python=None).model_key


def test_a_rerun_keeps_the_interpreter_a_run_json_names(tmp_path):
    from branchscope.profiling.trace.records import RunRecord

    def options(python_executable: str | None) -> RunOptions:
        found = RunOptions.from_record(RunRecord(source="demo", model="demo twin-mm", python_executable=python_executable))
        assert found is not None and found.demo == "twin-mm"
        return found

    assert options("/envs/torch/bin/python").python == Path("/envs/torch/bin/python")
    assert options(sys.executable).python is None  # this Python's own: as before
    assert options(None).python is None  # a run from before run.json named it


def test_the_worker_command_bootstraps_branchscope_under_that_python(tmp_path):
    python = tmp_path / "env" / "bin" / "python"
    cmd = worker_command(_request(tmp_path / "out", python), tmp_path / "stage")
    assert cmd[:4] == [str(python), "-I", "-c", BOOTSTRAP]  # isolated: nothing from the current folder
    assert Path(cmd[4]) == package_root() and (package_root() / "profiling" / "run" / "worker.py").is_file()
    assert cmd[5:] == _request(tmp_path / "stage", python).argv(worker=True)
    # Without --python: as always.
    assert worker_command(_request(tmp_path / "out", None), tmp_path / "stage")[:4] == [
        sys.executable, "-I", "-m", "branchscope.profiling.run.worker"]  # fmt: skip


def test_a_distributed_run_launches_its_ranks_under_that_python(tmp_path):
    python = tmp_path / "env" / "bin" / "python"
    cmd = launcher_command(_request(tmp_path / "out", python, nproc=2), tmp_path / "stage")
    at = cmd.index("torch.distributed.run")
    assert cmd[:3] == [sys.executable, "-I", "-m"]  # the shim is branchscope's (it needs branchscope)
    assert cmd[at - 3 : at] == [str(python), "-I", "-m"]
    after = cmd[cmd.index("--no-python") + 2 :]
    assert after[:4] == [str(python), "-I", "-c", BOOTSTRAP]


def test_locate_keeps_symlinks_and_never_looks_in_the_current_folder(tmp_path, monkeypatch):
    real = _fake_python(tmp_path, "{}", name="python-real")
    (tmp_path / "bin").mkdir()
    link = tmp_path / "bin" / "python3.99"
    link.symlink_to(real)
    monkeypatch.chdir(tmp_path)
    assert locate("bin/python3.99") == link  # absolute, the link kept (a venv's python is one)
    monkeypatch.setenv("PATH", os.pathsep.join([".", "bin", str(tmp_path / "bin")]))
    assert locate("python3.99") == link
    monkeypatch.setenv("PATH", os.pathsep.join([".", "bin"]))  # relative folders only: not looked in
    assert locate("python3.99") == tmp_path / "python3.99"


# ---- the probe's verdicts -----------------------------------------------------------------------

_OK = '"python": "3.12.1", "executable": "x", "torch": "2.14.1", "missing": {}, "versions": {"msgspec": "0.19.0", "psutil": "7.0.0", "numpy": "2.1.0"}, "gil": true'


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ('{"python": "3.8.10", "gil": true}', "is Python 3.8.10; branchscope's worker needs Python 3.10 or newer"),
        ('{"python": "3.11.2", "torch": null, "torch_error": "No module named \'torch\'", "missing": {"msgspec": "x", "psutil": "y"}}',
         "torch is not importable there (No module named 'torch'); also missing: msgspec, psutil"),
        ('{"python": "3.11.2", "torch": "2.8.0", "missing": {"psutil": "No module named \'psutil\'"}, "versions": {"msgspec": "0.17.1"}}',
         "branchscope's worker needs psutil, msgspec 0.17.1 (needs 0.18+) there (torch 2.8.0 is); install them into that environment"),
        ('{"python": "3.11.2", "torch": "2.8.0", "missing": {}, "worker_error": "SyntaxError: invalid syntax"}',
         "branchscope's worker cannot be imported there (SyntaxError: invalid syntax)"),
    ],
)  # fmt: skip
def test_what_is_missing_is_said_in_one_line(tmp_path, answer, says):
    python, said = _refusal(tmp_path, answer)
    assert said == f"--python {python}: {says}"


def test_a_passing_probe_says_what_the_interpreter_is(tmp_path):
    python = _fake_python(tmp_path, "{" + _OK.replace('"gil": true', '"gil": false') + "}")
    found = check(python)
    assert (found.executable, found.python, found.torch, found.gil) == (python, "3.12.1", "2.14.1", False)
    assert found.describe() == f"{python} (Python 3.12.1, torch 2.14.1, GIL off)"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a folder, not a Python executable (its bin/python, perhaps?)"),
        (lambda p: p.write_text("print(1)\n"), "is not executable"),
    ],
)
def test_a_path_that_is_no_program_is_refused(tmp_path, make, says):
    path = tmp_path / "python"
    make(path)
    with pytest.raises(InterpreterError, match=f"^{re.escape(f'--python {path}: {says}')}$"):
        check(path)


def test_a_program_that_is_no_python_is_refused_with_its_last_words(tmp_path):
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\necho 'unknown option -I' >&2\nexit 3\n")
    path.chmod(0o755)
    with pytest.raises(InterpreterError) as err:
        check(path)
    assert str(err.value) == f"--python {path}: is not a Python that can run the worker (exit code 3: unknown option -I)"


def test_a_probe_that_hangs_is_stopped(tmp_path):
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\nexec sleep 300\n")
    path.chmod(0o755)
    with pytest.raises(InterpreterError, match="did not answer within 0.5 s"):
        check(path, timeout=0.5)


# ---- real interpreters -----------------------------------------------------------------------------


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="branchscope")
    cmd_profile.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_a_python_without_torch_is_refused_before_out_is_touched(bare_python, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    code = _cli(["profile", "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1",
                 "--out", str(out), "--python", str(bare_python)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"error: --python {bare_python}: torch is not importable there (No module named 'torch'); "
        "also missing: msgspec, psutil, numpy"
    ]
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]  # no lock, no staging folder


def test_a_sweep_refuses_it_before_its_folder_is_made(bare_python, tmp_path):
    req = SweepRequest(out=tmp_path / "sweep", modes=("sequential",), interop=(1,), intra=(1, 2),
                       options=RunOptions(demo="twin-mm", python=bare_python))  # fmt: skip
    result = run_sweep(req)
    assert result.exit_code == 2 and "torch is not importable there" in (result.message or "")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_a_run_under_another_environment_without_branchscope(user_python, tmp_path):
    # That environment has torch but cannot import branchscope by itself.
    alone = subprocess.run([str(user_python), "-I", "-c", "import torch, branchscope"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=120)  # fmt: skip
    assert alone.returncode != 0 and "No module named 'branchscope'" in alone.stderr
    model = tmp_path / "records.py"
    model.write_text(_MODEL)
    out = tmp_path / "out"
    req = RunRequest(mode="sequential", interop=1, intra=1, out=out,
                     options=RunOptions(model=model, steps=2, warmup=1, python=user_python))  # fmt: skip
    result = run_profile(req)
    assert result.ok, (result.message, result.traceback)
    executable, prefix = (tmp_path / "ran-under-0.txt").read_text().splitlines()
    assert (executable, prefix) == (str(user_python), str(user_python.parent.parent))
    assert result.interpreter is not None and result.interpreter.executable == user_python
    assert f"the worker ran under {result.interpreter.describe()}" in result.notes
    run = read_run_record(out)
    assert run is not None and run.complete and run.torch == result.interpreter.torch
    assert run.python_executable in (None, str(user_python))  # None until the worker writes it


@pytest.mark.slow
def test_a_distributed_run_under_another_environment(user_python, tmp_path):
    model = tmp_path / "records.py"
    model.write_text(_MODEL)
    req = RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path / "out",
                     options=RunOptions(model=model, steps=2, warmup=1, nproc=2, python=user_python))  # fmt: skip
    result = run_profile(req)
    assert result.ok, (result.message, result.traceback)
    for rank in (0, 1):
        assert (tmp_path / f"ran-under-{rank}.txt").read_text().splitlines()[0] == str(user_python)


def test_the_probe_and_bootstrap_stay_importable_without_torch():
    """The runner imports the interpreter module: it must not import torch (the contract in pyproject)."""
    code = "import sys, branchscope.profiling.run.interpreter; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-I", "-c", code], timeout=120).returncode == 0
    assert interpreter.TORCH_OLDEST == "2.7"
