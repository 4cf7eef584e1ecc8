"""The mode registry and its traits: each mode declares its traits as data, older folders read as
their modes ran (the legacy table), a run's recorded traits win over the table, and a mode file named
by BRANCHSCOPE_MODES is registered in any process that imports the registry (a bad one says why)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from branchscope.profiling.run.modes import BASELINE_MODE, MODES
from branchscope.profiling.trace.mode_traits import (
    INTEROP_POOL,
    LEGACY,
    PYTHON_POOL,
    UNKNOWN,
    ModeTraits,
    baseline_mode,
    run_traits,
    traits_of,
)
from branchscope.profiling.trace.records import RunRecord
from tests.paths import FIXTURES, ROOT


def test_the_four_modes_declare_the_traits_older_folders_are_read_with():
    for name, traits in LEGACY.items():
        assert MODES[name].traits == traits, name
    assert [n for n, m in MODES.items() if m.traits.baseline] == [BASELINE_MODE] == [baseline_mode()]
    assert {n for n, m in MODES.items() if m.traits.branch_pool} == {"fork", "threads"}
    assert [n for n, m in MODES.items() if m.traits.gil_measured] == ["threads"]


def test_traits_answer_what_readers_asked_of_the_modes_names():
    fork, threads, seq = LEGACY["fork"], LEGACY["threads"], LEGACY["sequential"]
    assert fork.side_by_side(2) and not fork.side_by_side(1) and not seq.side_by_side(4)
    assert (seq.threads(4, 2), fork.threads(2, 2), LEGACY["streams"].threads(2, 1)) == (2, 4, 2)
    assert (fork.pool_title, threads.pool_title, seq.pool_title) == ("inter-op pool", "Python pool", "inter-op pool")
    assert threads.runs_text(1) == "on 1 Python thread" and fork.runs_text(2) == "on 2 inter-op threads"


def test_a_runs_recorded_traits_win_over_the_table_and_an_unknown_mode_has_none():
    own = ModeTraits(pool=PYTHON_POOL, gil_measured=True, title="mine")
    assert traits_of("fork", own) is own
    assert traits_of("fork") == LEGACY["fork"] and traits_of("nobody") is UNKNOWN and traits_of(None) is UNKNOWN
    assert run_traits(RunRecord(mode="threads")) == LEGACY["threads"]  # a run.json of before the traits
    assert run_traits(RunRecord(mode="x", mode_traits=own)) is own and run_traits(None) is UNKNOWN


def test_run_json_reads_its_traits_leniently():
    run = RunRecord.parse({"mode": "x", "mode_traits": {"pool": INTEROP_POOL, "gil_measured": "yes", "title": 3}})
    assert run.mode_traits == ModeTraits(pool=INTEROP_POOL)
    assert RunRecord.parse({"mode": "x", "mode_traits": ["pool"]}).mode_traits is None


def _registry(entries: str) -> subprocess.CompletedProcess[str]:
    code = "import os; from branchscope.profiling.run.modes import MODES; print(list(MODES)); print(os.environ['BRANCHSCOPE_MODES'])"
    env = {**os.environ, "BRANCHSCOPE_MODES": entries}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_mode_file_named_in_the_environment_is_registered_by_its_absolute_path():
    proc = _registry(os.path.relpath(FIXTURES / "modes" / "pythreads.py", ROOT))
    assert proc.returncode == 0, proc.stderr
    names, entries = proc.stdout.splitlines()
    assert names == "['sequential', 'fork', 'threads', 'streams', 'pythreads']"
    assert entries == str(FIXTURES / "modes" / "pythreads.py")  # what the worker, elsewhere, inherits


@pytest.mark.parametrize("entry", ["branchscope.profiling.run.modes.fork", "json"])
def test_a_module_that_is_no_new_mode_is_refused_with_why(entry):
    proc = _registry(entry)
    assert proc.returncode != 0
    assert f"BRANCHSCOPE_MODES: {entry} must define MODE = Mode(name=…) with a name of its own" in proc.stderr


@pytest.mark.parametrize("body", [None, "raise RuntimeError('not today')\n", "def broken(:\n"])
def test_a_mode_file_that_cannot_be_imported_is_one_error_line_and_exit_2(tmp_path, body):
    path = tmp_path / "mymode.py"
    if body is not None:
        path.write_text(body)
    env = {**os.environ, "BRANCHSCOPE_MODES": str(path)}
    trace = FIXTURES / "traces"  # any command: each imports the registry as it builds its parser
    proc = subprocess.run([sys.executable, "-m", "branchscope.app.cli", "inspect", str(trace)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: BRANCHSCOPE_MODES: {path} cannot be imported: ")
    assert ("FileNotFoundError" if body is None else "not today" if "raise" in body else "SyntaxError") in line


def test_a_file_that_raises_as_it_is_imported_leaves_nothing_in_sys_modules(tmp_path):
    from branchscope.profiling.run.user_files import exec_file

    path = tmp_path / "half.py"
    path.write_text("X = 1\nraise RuntimeError('half way')\n")
    with pytest.raises(RuntimeError, match="half way"):
        exec_file(path, "branchscope_test_half")
    assert "branchscope_test_half" not in sys.modules
    path.write_text("X = 2\n")
    assert exec_file(path, "branchscope_test_half").X == 2 and sys.modules.pop("branchscope_test_half").X == 2
