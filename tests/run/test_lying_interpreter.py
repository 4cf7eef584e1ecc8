"""`--python` pointing at something that lies: a script that starts a daemon before it answers, keeps
the pipes open after it answered, or answers with malformed data. The probe is a contained child
like a worker (nothing it started outlives it), its answer is read up to the answer line (never to
the end of a pipe a daemon holds) and decoded into a typed record with bounded size and depth;
a malformed answer is one `error:` line and exit 2.

The interpreters are shell scripts that answer the probe themselves (fast, no torch); the daemons
they start carry a marker in their command line, which the tests look for afterwards.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from branchscope.profiling.run.interpreter import InterpreterError, check
from branchscope.profiling.trace.records import (
    MAX_ANSWER_DEPTH,
    MalformedAnswer,
    decode_answer,
    json_deeper_than,
)
from tests.processes import kill_all, mentioning, wait_until
from tests.run.test_worker_python import _cli, _fake_python, _refusal

_OK = (
    '{"python": "3.12.1", "executable": "x", "torch": "2.14.1", "missing": {}, '
    '"versions": {"msgspec": "0.19.0", "psutil": "7.0.0", "numpy": "2.1.0"}, "gil": true}'
)

#: A daemon as a model or a wrapper script would start one: fork, setsid, fork again, then sleep with
#: MARKER in its command line. It says it runs by making DIR/started. `{keep}`: whether it keeps the
#: stdout and stderr it inherited (else /dev/null).
_DAEMON = """\
import os, sys, time
marker, started, keep, clear = sys.argv[1], sys.argv[2], sys.argv[3] == "keep", sys.argv[4] == "clear"
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
if not keep:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
if clear:
    os.environ.clear()
    os.execv(sys.executable, [sys.executable, "-c", "import time; open(%r, 'w').close(); time.sleep(600)" % started, marker])
open(started, "w").close()
time.sleep(600)
"""


def _liar(tmp_path: Path, *, answer: str | None = _OK, keep: bool = False, clear: bool = False, exit_code: int = 0) -> tuple[Path, str]:
    """A `python` that starts a daemon, waits until it runs, then answers the probe with `answer`
    (None: says something on stderr and exits `exit_code` without answering). Returns it and the
    daemon's marker."""
    marker = f"bs-daemon-{uuid.uuid4().hex}"
    (tmp_path / "daemon.py").write_text(_DAEMON)
    started = tmp_path / "started"
    lines = [
        "#!/bin/sh",
        f"'{sys.executable}' -I '{tmp_path / 'daemon.py'}' {marker} '{started}' {'keep' if keep else 'null'} "
        f"{'clear' if clear else 'keep-env'}",
        f"while [ ! -e '{started}' ]; do sleep 0.01; done",
    ]
    if answer is not None:
        lines += ["cat <<'EOF'", f"branchscope-probe: {answer}", "EOF"]
    else:
        lines += ["echo 'no module named encodings' >&2", f"exit {exit_code}"]
    path = tmp_path / "python"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path, marker


@pytest.fixture
def daemons():
    """Markers of the daemons a test starts; any still alive at its end is killed (and fails it)."""
    markers: list[str] = []
    yield markers
    left = [p.pid for m in markers for p in mentioning(m)]
    kill_all(left)
    assert not left, "a daemon outlived the probe"


def _gone(marker: str) -> None:
    wait_until(lambda: not mentioning(marker), 30, f"the daemon {marker} to be stopped")


# ---- 1. nothing the probe started outlives it ------------------------------------------------------


@pytest.mark.parametrize("clear", [False, True], ids=["daemon", "daemon-without-token"])
def test_a_daemon_started_while_probing_is_stopped_with_the_probe(tmp_path, daemons, clear):
    python, marker = _liar(tmp_path, clear=clear)
    daemons.append(marker)
    found = check(python)
    assert found.torch == "2.14.1"
    _gone(marker)


# ---- 3. the answer is read up to its line, not to the end of the pipe ----------------------------


def test_a_daemon_holding_the_probes_pipes_does_not_hold_the_answer(tmp_path, daemons):
    python, marker = _liar(tmp_path, keep=True)
    daemons.append(marker)
    # Before: the runner read the pipe to its end and said "did not answer within 60 s".
    found = check(python, timeout=60)
    assert found.python == "3.12.1"
    _gone(marker)


def test_a_probe_that_exits_without_answering_is_named_for_that_not_a_hang(tmp_path, daemons):
    python, marker = _liar(tmp_path, answer=None, keep=True, exit_code=1)
    daemons.append(marker)
    with pytest.raises(InterpreterError) as err:
        check(python, timeout=60)
    assert str(err.value) == (
        f"--python {python}: is not a Python that can run the worker (exit code 1: no module named encodings); "
        "a process it started kept its output open and was stopped"
    )
    _gone(marker)


# ---- 2. a malformed answer is one line ------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (_OK.replace('"missing": {}', '"missing": 5'), "the probe's answer is malformed: Expected `object`, got `int` - at `$.missing`"),
        (_OK.replace('"gil": true', '"gil": "yes"'), "the probe's answer is malformed: Expected `bool`, got `str` - at `$.gil`"),
        ('{"torch": "2.14.1"}', "the probe's answer is malformed: Object missing required field `python`"),
        ('[1, 2]', "the probe's answer is malformed: Expected `object`, got `array`"),
        ('{"python": "3.12.1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", f"the probe's answer nests deeper than {MAX_ANSWER_DEPTH} levels"),
        ('{"python": "' + "x" * (2 << 20) + '"}', "the probe's answer is larger than 1 MiB"),
        ('{"python": "3.12.1", ', "the probe's answer is not JSON: Input data was truncated"),
    ],
    ids=["wrong-type", "wrong-bool", "no-python", "a-list", "nested-100000", "3-MiB-one-line", "truncated"],
)  # fmt: skip
def test_a_malformed_answer_is_one_line(tmp_path, answer, says):
    python, said = _refusal(tmp_path, answer)
    assert said == f"--python {python}: {says}"


@pytest.mark.parametrize("bad", ['"missing": 5', "nested"])
def test_profile_says_a_malformed_answer_in_one_error_line_and_exits_2(tmp_path, capsys, bad):
    answer = _OK.replace('"missing": {}', '"missing": 5') if bad != "nested" else "[" * 100_000 + "]" * 100_000
    python = _fake_python(tmp_path, answer)
    out = tmp_path / "out"
    code = _cli(["profile", "--demo", "twin-mm", "--mode", "sequential", "--interop", "1", "--intra", "1",
                 "--out", str(out), "--python", str(python)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith(f"error: --python {python}: the probe's answer ")
    assert "Traceback" not in err and not out.exists()


class _Rec(msgspec.Struct):
    a: int = 0


def test_decode_answer_bounds_hold_whatever_the_bytes():
    assert decode_answer(b'{"a": 3}', _Rec, "x").a == 3
    # Brackets inside strings are not nesting; an escaped quote does not end a string.
    assert json_deeper_than(b'{"a": "[[[[[[\\"[[[[", "b": [[1]]}', 2)
    assert not json_deeper_than(b'{"a": "[[[[[[\\"[[[[", "b": [[1]]}', 3)
    assert not json_deeper_than(b'"' + b"[" * 100 + b'"', 0)
    for data in (b"\xff\xfe", b"", b"{" * 70, b'{"a": 1e999999}'):
        with pytest.raises(MalformedAnswer):
            decode_answer(data, _Rec, "x")


# ---- a worker whose final record is malformed ---------------------------------------------------


def _worker_that_lies(tmp_path: Path, run_json: str) -> Path:
    """A `python` that answers the probe well and, run as the worker, writes `run_json` as its
    run.json in the --out it is given, says it finished, and exits 0."""
    (tmp_path / "run.json.txt").write_text(run_json)
    path = tmp_path / "python"
    path.write_text(
        "#!/bin/sh\n"
        'case "$3" in *branchscope-probe*)\n'
        f"  echo 'branchscope-probe: {_OK}'; exit 0;;\n"
        "esac\n"
        'while [ $# -gt 0 ]; do if [ "$1" = --out ]; then out="$2"; fi; shift; done\n'
        f"cp '{tmp_path / 'run.json.txt'}' \"$out/run.json\"\n"
        'echo \'{"event": "finished", "run": "run.json"}\'\n'
    )
    path.chmod(0o755)
    return path


_MALFORMED_RUNS = {
    "nested": ('{"complete": true, "x": ' + "[" * 100 + "]" * 100 + "}", "nests deeper than 64 levels"),
    "a-list": ("[1, 2]", "is not a JSON object"),
    "wrong-types": ('{"complete": "yes", "mode": 5}', "no complete record of branchscope's"),
    "not-json": ("complete", "is not JSON"),
}


@pytest.mark.parametrize("case", sorted(_MALFORMED_RUNS))
def test_a_worker_whose_final_record_is_malformed_fails_the_run_with_exit_4(tmp_path, case):
    from branchscope.profiling.run.options import RunOptions
    from branchscope.profiling.run.protocol import RunRequest
    from branchscope.profiling.run.runner import run_profile

    run_json, says = _MALFORMED_RUNS[case]
    python = _worker_that_lies(tmp_path, run_json)
    out = tmp_path / "out"
    req = RunRequest(mode="sequential", interop=1, intra=1, out=out,
                     options=RunOptions(demo="twin-mm", steps=2, warmup=1, python=python))  # fmt: skip
    result = run_profile(req)
    assert result.exit_code == 4
    assert (result.message or "").startswith("the worker said it finished, but its final record is ")
    assert says in (result.message or "") and "\n" not in (result.message or "")
    assert not out.exists()  # nothing of it reached OUT


def test_in_a_sweep_a_malformed_worker_answer_is_a_failed_cell_not_the_sweeps_end(tmp_path):
    from branchscope.profiling.run.options import RunOptions
    from branchscope.profiling.run.sweep import SweepRequest, run_sweep
    from branchscope.profiling.trace.events import CellEvent
    from branchscope.profiling.trace.sweep_records import FAILED

    python = _worker_that_lies(tmp_path, "[1, 2]")
    cells: list[CellEvent] = []
    req = SweepRequest(out=tmp_path / "sweep", modes=("sequential",), interop=(1,), intra=(1, 2),
                       options=RunOptions(demo="twin-mm", steps=2, warmup=1, python=python))  # fmt: skip
    result = run_sweep(req, lambda e: cells.append(e) if isinstance(e, CellEvent) else None)
    assert [c.cell.status for c in cells] == [FAILED, FAILED]  # both cells ran: the first did not end the sweep
    assert all(c.cell.exit_code == 4 and "its final record is unreadable" in (c.cell.error or "") for c in cells)
    assert result.sweep is not None and result.sweep.complete


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


#: JSON values whose strings are full of brackets, quotes and backslashes.
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\n', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=4), inner, max_size=3),
    max_leaves=30,
)


@given(_values, st.integers(min_value=0, max_value=8))
def test_json_deeper_than_tells_the_depth_of_what_the_text_decodes_to(value, limit):
    text = json.dumps(value, ensure_ascii=False).encode()
    assert json_deeper_than(text, limit) == (_depth(value) > limit)


def test_a_probe_that_closes_its_output_and_exits_later_is_named_by_its_exit(tmp_path):
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\nexec >&- 2>&-\nsleep 0.2\nexit 5\n")
    path.chmod(0o755)
    with pytest.raises(InterpreterError) as err:
        check(path, timeout=60)
    assert str(err.value) == f"--python {path}: is not a Python that can run the worker (exit code 5)"
