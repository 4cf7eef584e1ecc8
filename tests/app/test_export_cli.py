"""`branchscope export SOURCE OUT [--force]`: written, and said in one line; every bad input one
`error:` line and exit 2, leaving what was there as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from branchscope.app.cli import main
from branchscope.profiling.trace.reader import load_trace
from tests.builders.export_traces import trace_facts, write_kineto_like
from tests.builders.runs import write_run_folder, write_sweep_folder


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["export", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", ["run.pftrace", "run.perfetto-trace", "run.json", "run.json.gz"])
def test_a_run_folder_is_written_in_the_format_its_name_says(tmp_path, capsys, name):
    run = write_run_folder(tmp_path / "run", "fork", 2, 1, 20.0)
    rc, out, err = run_cli(capsys, str(run), str(tmp_path / name))
    assert (rc, err) == (0, "")
    fmt = "perfetto" if "perfetto" in name or name.endswith(".pftrace") else "chrome"
    assert out.startswith(f"wrote {tmp_path / name} ({fmt}, ") and out.count("\n") == 1
    if fmt == "chrome":
        assert trace_facts(load_trace(tmp_path / name)) == trace_facts(load_trace(run / "trace.json.gz"))


def _refused(capsys, tmp_path: Path, *argv: str, says: str) -> None:
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys):
    trace = write_kineto_like(tmp_path / "k.json")
    mine = tmp_path / "mine.json"
    mine.write_text("a file branchscope did not write")
    _refused(capsys, tmp_path, str(trace), str(mine), says="exists; pass --force")
    _refused(capsys, tmp_path, str(trace), str(tmp_path / "out.txt"), says="cannot tell the format")
    _refused(capsys, tmp_path, str(tmp_path / "absent.json"), str(tmp_path / "o.json"), says="absent.json")
    (tmp_path / "junk.json").write_bytes(b"\x00\x01 not a trace")
    _refused(capsys, tmp_path, str(tmp_path / "junk.json"), str(tmp_path / "o.pftrace"), says="junk.json")
    sweep = write_sweep_folder(tmp_path / "sweep")
    _refused(capsys, tmp_path, str(sweep), str(tmp_path / "o.json"), says="is a sweep folder")
    (tmp_path / "dir.json").mkdir()
    _refused(capsys, tmp_path, str(trace), str(tmp_path / "dir.json"), "--force", says="not a regular file")


def test_force_replaces_a_file(tmp_path, capsys):
    trace = write_kineto_like(tmp_path / "k.json")
    out = tmp_path / "out.json"
    out.write_text("old")
    rc, _, err = run_cli(capsys, str(trace), str(out), "--force")
    assert (rc, err) == (0, "") and trace_facts(load_trace(out)) == trace_facts(load_trace(trace))


def test_a_pid_beyond_int32_is_written_and_ctrl_c_is_one_line_exit_130(tmp_path, capsys, monkeypatch):
    import json

    from branchscope.app import cmd_export

    source = tmp_path / "wide.json"
    event = {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 2**40, "tid": 2**33, "ts": "1.000", "dur": "2.000"}
    source.write_text(json.dumps({"traceEvents": [event]}))
    rc, out, err = run_cli(capsys, str(source), str(tmp_path / "wide.pftrace"))
    assert (rc, err) == (0, "") and len(load_trace(tmp_path / "wide.pftrace")) == 1

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cmd_export, "export_trace", interrupted)
    rc, out, err = run_cli(capsys, str(source), str(tmp_path / "cut.pftrace"))
    assert rc == 130 and out == "" and err.startswith("error: ") and err.count("\n") == 1 and "interrupted" in err


def test_out_the_source_itself_is_refused_even_with_force(tmp_path, capsys):
    trace = write_kineto_like(tmp_path / "k.json")
    _refused(capsys, tmp_path, str(trace), str(trace), "--force", says="is the source")
    run = write_run_folder(tmp_path / "run", "fork", 2, 1, 20.0)
    _refused(capsys, tmp_path, str(run), str(run / "trace.json.gz"), "--force", says="inside the source folder")
