"""A torch newer than the newest tested (`interpreter.TORCH_NEWEST_TESTED`) runs, with one warning line
naming the tested range: in run.json's warnings (printed by `profile`, shown in the window), and once
before `sweep` and `speedup` run. pyproject's torch has no upper bound (tests/test_architecture.py).

The newer torch is faked: a shell script answering the probe with its version (no torch started), or,
for one real run, a wrapper of this environment's Python that sets `torch.__version__` before the
code it is given (probe and worker alike) runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from branchscope.app.cli import main as cli_main
from branchscope.profiling.run.interpreter import TORCH_NEWEST_TESTED, TORCH_OLDEST, untested_torch_warning
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.runner import untested_torch
from branchscope.profiling.trace.records import read_run_record

_NEWER = "torch 2.16.0 is newer than the newest tested (2.7–2.14.1)"


def _answering(tmp_path: Path, torch: str) -> Path:
    """A fake Python whose probe answer says torch `torch` (and every worker need present)."""
    answer = (
        f'{{"python": "3.11.9", "executable": "x", "torch": "{torch}", "missing": {{}}, '
        '"versions": {"msgspec": "0.19.0", "psutil": "7.0.0", "numpy": "2.1.0"}, "gil": true}'
    )
    path = tmp_path / f"python-{torch}"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\nbranchscope-probe: {answer}\nEOF\n")
    path.chmod(0o755)
    return path


def _warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("warning: torch")]


@pytest.mark.parametrize(
    ("torch", "warns"),
    [("2.16.0", True), ("2.15.0a0+git1234", True), ("3.0.0", True), ("2.14.2", True),
     (TORCH_NEWEST_TESTED, False), ("2.14.1+cu130", False), ("2.13.0+cpu", False), ("2.6.0", False), (None, False)],
)  # fmt: skip
def test_only_a_torch_newer_than_the_newest_tested_is_warned_of(torch, warns):
    warning = untested_torch_warning(torch)
    assert (warning is not None) == warns
    if warns:
        assert warning.startswith(f"torch {torch} is newer than the newest tested ({TORCH_OLDEST}–{TORCH_NEWEST_TESTED}); ")
        assert "\n" not in warning


def test_the_warning_follows_the_probe_of_python(tmp_path):
    assert untested_torch(RunOptions(demo="twin-mm", python=_answering(tmp_path, "2.16.0"))).startswith(_NEWER)
    assert untested_torch(RunOptions(demo="twin-mm", python=_answering(tmp_path, "2.14.1+cu130"))) is None
    # A --python the probe refuses is left to the run's validation, which says why in its error.
    assert untested_torch(RunOptions(demo="twin-mm", python=tmp_path / "missing")) is None


def test_without_python_it_reads_this_environments_torch(monkeypatch):
    import importlib.metadata

    from branchscope.profiling.run import runner

    real = importlib.metadata.version
    monkeypatch.setattr(runner.importlib.metadata, "version", lambda name: "2.16.0" if name == "torch" else real(name))
    assert untested_torch(RunOptions(demo="twin-mm")).startswith(_NEWER)
    monkeypatch.setattr(runner.importlib.metadata, "version", lambda name: "2.13.0")
    assert untested_torch(RunOptions(demo="twin-mm")) is None


@pytest.mark.parametrize("torch", ["2.16.0", "2.14.1"])
def test_sweep_and_speedup_say_it_once_before_they_run(tmp_path, capsys, torch):
    """Each refuses its --out after the warning (a file where a folder goes), so no worker starts."""
    python = _answering(tmp_path, torch)
    taken = tmp_path / "a-file"
    taken.write_text("the user's")
    sweep = ["sweep", "--demo", "twin-mm", "--modes", "sequential", "--interop", "1", "--intra", "1",
             "--out", str(taken), "--python", str(python), "--quiet"]  # fmt: skip
    speedup = ["speedup", "--demo", "twin-mm", "--configs", "sequential:1x1,threads:2x1", "--out", str(taken),
               "--python", str(python), "--quiet"]  # fmt: skip
    for argv in (sweep, speedup):
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1].startswith("error: ")  # the refusal stays the last line
        said = _warnings(err)
        assert len(said) == (1 if torch == "2.16.0" else 0), err
        assert not said or said[0].startswith(f"warning: {_NEWER}; ")
    assert taken.read_text() == "the user's"


def _wrapper(tmp_path: Path, torch: str) -> Path:
    """This environment's Python, with `torch.__version__` set to `torch` before any `-c` code runs:
    the probe and the worker both see that version."""
    path = tmp_path / "python"
    prefix = f"import torch; torch.__version__ = {torch!r}\n"
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "at = args.index('-c') + 1\n"
        f"args[at] = {prefix!r} + args[at]\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, *args])\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_a_run_under_a_newer_torch_warns_once_and_run_json_keeps_it(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(["profile", "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1",
                     "--steps", "2", "--warmup", "1", "--out", str(out), "--python", str(_wrapper(tmp_path, "2.16.0")),
                     "--quiet"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    said = _warnings(captured.out + captured.err)
    assert len(said) == 1 and said[0].startswith(f"warning: {_NEWER}; "), captured.out
    run = read_run_record(out)
    assert run is not None and run.torch == "2.16.0"
    assert [w for w in run.warnings or [] if w.startswith("torch ")] == [said[0].removeprefix("warning: ")]


@pytest.mark.parametrize(("torch", "named"), [("2.16.0", True), ("2.14.1", False)])
def test_a_failed_run_under_a_newer_torch_names_it_in_its_error(tmp_path, torch, named):
    """The fake Python answers the probe, then dies as the worker: a failed run whose one error
    line says the torch was newer than the newest tested, the likeliest cause the user cannot see."""
    from branchscope.profiling.run.protocol import RunRequest
    from branchscope.profiling.run.runner import run_profile

    options = RunOptions(demo="twin-mm", python=_answering(tmp_path, torch))
    result = run_profile(RunRequest("sequential", 1, 1, tmp_path / "out", options))
    assert not result.ok and result.message
    assert (_NEWER.replace("2.16.0", torch) in result.message) == named
    assert "\n" not in result.message
