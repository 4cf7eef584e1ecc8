"""The worker's isolation explained where it bites: a model whose import fails with ModuleNotFoundError
says, when the module sits in a folder of PYTHONPATH (or beside the model file), that the worker runs
isolated (`python -I`) and how to make the module importable; with PYTHONPATH set but holding it
nowhere, plainly that it is not installed in that Python; nothing more without PYTHONPATH.

The words come from one place (`model_source.import_hint`), part of the run's one-line message: the
CLI's `error:` line and the window's failure dialog both show it.
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

import pytest

from branchscope.profiling.run.model_source import import_hint
from branchscope.profiling.run.options import RunOptions
from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, RunRequest
from branchscope.profiling.run.runner import print_failure, run_profile

_MISSING = "bs_only_on_pythonpath"


def _not_found(name: str = _MISSING) -> ModuleNotFoundError:
    """The error importing `name` raises here (where it is on no folder of sys.path)."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        return exc
    raise AssertionError(f"{name} imported")


@pytest.fixture
def lib(tmp_path) -> Path:
    """A folder holding the module, as a user's PYTHONPATH would."""
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / f"{_MISSING}.py").write_text("VALUE = 1\n")
    return folder


def test_a_module_on_pythonpath_says_the_worker_is_isolated_and_how_to_import_it(lib, tmp_path):
    hint = import_hint(_not_found(), tmp_path / "model.py", {"PYTHONPATH": f"/nowhere:{lib}"})
    assert hint == (
        f"; {_MISSING} is on PYTHONPATH ({lib}), but the worker runs isolated (python -I: PYTHONPATH, the user's "
        "site-packages and the model file's folder are not on its sys.path). To import it there, run with --python "
        f"an environment that has {_MISSING} installed (pip install -e its package into it), or have the model file "
        f"add the folder to sys.path (sys.path.insert(0, {str(lib)!r}))"
    )


def test_a_package_and_a_cause_are_found_too(tmp_path):
    folder = tmp_path / "src"
    (folder / "bs_pkg_on_path").mkdir(parents=True)
    (folder / "bs_pkg_on_path" / "__init__.py").write_text("")
    try:  # a library wrapping it: `raise ImportError("install it") from e`
        try:
            importlib.import_module("bs_pkg_on_path.sub")
        except ModuleNotFoundError as exc:
            raise ImportError("bs_pkg_on_path is needed: pip install it") from exc
    except ImportError as wrapped:
        hint = import_hint(wrapped, None, {"PYTHONPATH": str(folder)})
    assert hint.startswith(f"; bs_pkg_on_path is on PYTHONPATH ({folder}), but the worker runs isolated (python -I")


def test_a_module_beside_the_model_file_says_so(lib):
    hint = import_hint(_not_found(), lib / "model.py", {})
    assert hint.startswith(f"; {_MISSING} is beside the model file ({lib}), but the worker runs isolated")


def test_pythonpath_set_without_the_module_says_plainly_it_is_not_installed(lib, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    # A relative folder is the runner's current folder's, which the worker does not know: not looked in.
    hint = import_hint(_not_found(), tmp_path / "model.py", {"PYTHONPATH": f"{empty}:lib"})
    assert hint == (
        f"; {_MISSING} is not installed in the worker's Python ({sys.executable}), nor in an absolute folder of "
        "PYTHONPATH (its relative folders, lib, were not looked in)"
    )
    assert import_hint(_not_found(), tmp_path / "model.py", {"PYTHONPATH": str(empty)}).endswith(
        "nor in an absolute folder of PYTHONPATH"
    )


@pytest.mark.parametrize(
    "exc",
    [_not_found(), ValueError("not an import"), _not_found("json.bs_no_such_part")],
    ids=["no-pythonpath", "not-a-missing-module", "a-part-of-an-installed-package"],
)
def test_no_hint_where_the_isolation_explains_nothing(exc, lib, tmp_path):
    environ = {} if isinstance(exc, ModuleNotFoundError) and exc.name == _MISSING else {"PYTHONPATH": str(lib)}
    assert import_hint(exc, tmp_path / "model.py", environ) == ""


def test_a_module_imported_while_the_model_runs_gets_the_hint_too(lib, tmp_path, monkeypatch):
    """A lazy import in forward() or train_step fails in a later phase (`model_setup.Model`)."""
    from branchscope.profiling.run.model_setup import Model

    monkeypatch.setenv("PYTHONPATH", str(lib))
    model = Model(torch=None, loaded=None, device="cpu", backend=None, user_file=tmp_path / "model.py",
                  is_cuda=False, sync_devices=[])  # fmt: skip
    failure = model._model_error(_not_found(), "the model", "running its forward")
    assert str(failure).startswith(
        f"the model raised ModuleNotFoundError while running its forward: No module named '{_MISSING}'; "
        f"{_MISSING} is on PYTHONPATH ({lib}), but the worker runs isolated (python -I"
    )
    monkeypatch.delenv("PYTHONPATH")
    assert str(model._model_error(_not_found(), "the model", "running its forward")).endswith(f"'{_MISSING}'")


@pytest.mark.slow
def test_a_run_whose_model_imports_from_pythonpath_fails_with_the_hint(lib, tmp_path, monkeypatch):
    """A real worker (it fails at the import, before any step): the message the CLI prints after
    `error:` and the runner hands the window (`ErrorEvent.message`) alike."""
    model = tmp_path / "model.py"
    model.write_text(f"import {_MISSING}\n\ndef build_model():\n    pass\n\ndef example_inputs():\n    return ()\n")
    monkeypatch.setenv("PYTHONPATH", str(lib))
    req = RunRequest(mode="sequential", interop=1, intra=1, out=tmp_path / "out",
                     options=RunOptions(model=model, steps=1, warmup=0))  # fmt: skip
    result = run_profile(req)
    assert result.exit_code == EXIT_BAD_INPUT
    said = io.StringIO()
    print_failure(result, said)
    last = said.getvalue().splitlines()[-1]
    assert last.startswith(f"error: importing model.py raised ModuleNotFoundError: No module named '{_MISSING}'; ")
    assert f"{_MISSING} is on PYTHONPATH ({lib}), but the worker runs isolated (python -I" in last
    assert "--python" in last and f"sys.path.insert(0, {str(lib)!r})" in last
