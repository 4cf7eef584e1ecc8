"""`branchscope X | head`: a sub-command whose reader closes stdout early ends quietly, exit 141
(128 + SIGPIPE, app/cli.EXIT_STDOUT_CLOSED), with no BrokenPipeError traceback on stderr; a
BrokenPipeError that is not stdout's still shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.app import cli
from tests.builders.runs import write_small_trace, write_timed_run
from tests.paths import ROOT


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Runs `branchscope ARGS` with stdout a pipe whose reader is already closed: its first write
    fails, as `| head` makes every write after the reader's last line fail."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "branchscope.app.cli", *args],
            cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
    finally:
        os.close(write_end)


def _after_one_line(*args: str) -> tuple[str, subprocess.CompletedProcess]:
    """`branchscope ARGS | head -n 1`, the reader in this process: one line read, then stdout closed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchscope.app.cli", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.wait(timeout=300)
    return first, subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)


def _assert_quiet(proc: subprocess.CompletedProcess, code: int = cli.EXIT_STDOUT_CLOSED) -> None:
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_small_trace(tmp_path_factory.mktemp("pipe") / "trace.json.gz", "fork")


@pytest.mark.parametrize("argv", [
    ["inspect", "{trace}"], ["inspect", "--json", "{trace}"], ["memory", "{trace}"],
    ["memory", "--json", "{trace}"], ["demos"],
], ids=" ".join)  # fmt: skip
def test_a_closed_stdout_ends_quietly_with_141(trace: Path, argv: list[str]) -> None:
    proc = _into_closed_pipe(*(a.format(trace=trace) for a in argv))
    _assert_quiet(proc)


@pytest.mark.parametrize("argv", [["--help"], ["inspect", "--help"], ["memory", "--help"]], ids=" ".join)
def test_help_into_a_closed_stdout_ends_quietly(argv: list[str]) -> None:
    """argparse swallows the failed write of its help itself: quiet, and exit 0 as --help's is."""
    _assert_quiet(_into_closed_pipe(*argv), code=0)


def test_compare_into_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    a = write_timed_run(tmp_path / "a", "sequential", 1, 1, [10.0, 11.0, 12.0])
    b = write_timed_run(tmp_path / "b", "fork", 2, 1, [6.0, 7.0, 8.0])
    _assert_quiet(_into_closed_pipe("compare", str(a), str(b)))


def test_a_reader_that_closes_after_one_line() -> None:
    """What `| head -n 1` does: the first line arrives; the rest, if it was still to be written,
    ends quietly (exit 141), else the command had finished (exit 0); never a traceback."""
    first, proc = _after_one_line("demos")
    assert first.strip()
    _assert_quiet(proc, code=proc.returncode)
    assert proc.returncode in (0, cli.EXIT_STDOUT_CLOSED)


def test_a_broken_pipe_that_is_not_stdouts_is_not_hidden(monkeypatch) -> None:
    """Only a closed stdout is quiet: a BrokenPipeError from a pipe of our own (to a worker) with
    stdout still open goes on as the error it is."""

    def broken(argv=None) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "main", broken)
    monkeypatch.setattr(sys, "path", list(sys.path))  # entry() takes the current folder off it
    with pytest.raises(BrokenPipeError):
        cli.entry()


def test_stdout_reader_gone_sees_a_closed_reader() -> None:
    read_end, write_end = os.pipe()
    try:
        assert not cli.stdout_reader_gone(write_end)  # a reader is there
        os.close(read_end)
        assert cli.stdout_reader_gone(write_end)
    finally:
        os.close(write_end)
