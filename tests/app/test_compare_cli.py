"""`branchscope compare`: real runs of a small demo (sequential 1×1, fork 2×1) and plain trace files
compared as JSON and as a table, the baseline, speedups, the op diff's order, bad input, and the
screenshot of the compare view."""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from branchscope.app import cmd_compare
from branchscope.app.screenshot_size import DEFAULT_SIZE
from tests.builders.runs import write_small_trace, write_sweep_folder, write_timed_run
from tests.paths import ROOT

RUN_KEYS = {"label", "path", "mode", "interop", "intra", "median_ms", "unprofiled_median_ms",
            "unprofiled_spread_ms", "parallelism", "cores_used", "peak_bytes", "ranks", "busy", "prediction",
            "gap", "starved", "parts"}  # fmt: skip


def cli(argv: list[str]) -> int:
    """The sub-command as app/cli.py wires it: register() on a subparsers action, then handler(args)."""
    parser = argparse.ArgumentParser(prog="branchscope")
    cmd_compare.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def branchscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "branchscope.app.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two real runs of the twin-mm demo, sequential 1×1 and fork 2×1, made once for this module."""
    out = tmp_path_factory.mktemp("compare_runs")
    folders = {}
    for mode, interop in (("sequential", 1), ("fork", 2)):
        folder = out / mode
        proc = branchscope(
            "profile", "--demo", "twin-mm", "--mode", mode, "--interop", str(interop), "--intra", "1",
            "--steps", "3", "--warmup", "1", "--out", str(folder),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        folders[mode] = folder
    return folders


def _json(capsys, *argv: str) -> dict:
    assert cli(["compare", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _run_json(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


@pytest.mark.slow
def test_json_of_two_real_runs(runs, capsys):
    # The fork run first: the baseline is the sequential 1×1 run wherever it is.
    doc = _json(capsys, str(runs["fork"]), str(runs["sequential"]))
    assert set(doc) == {"runs", "baseline", "baseline_chosen", "speedup", "ops", "advice", "vs_prediction"}
    assert doc["baseline_chosen"] is False
    # fork 2×1 computes with 2 threads, sequential 1×1 with one: which way serves better is not told.
    advice = doc["advice"]
    assert "sequential 1×2 beside it would tell" in advice["text"]
    assert advice["winner"] is None and advice["reason"].startswith("not paired: fork 2×1 computes with 2 threads")
    assert doc["baseline"] == 1
    fork, seq = doc["runs"]
    assert set(fork) == RUN_KEYS and set(seq) == RUN_KEYS
    assert (fork["label"], seq["label"]) == ("demo twin-mm · fork · 2×1", "demo twin-mm · sequential · 1×1")
    assert (fork["path"], seq["path"]) == (str(runs["fork"]), str(runs["sequential"]))
    assert (fork["mode"], fork["interop"], fork["intra"]) == ("fork", 2, 1)
    for run, folder in ((fork, runs["fork"]), (seq, runs["sequential"])):
        written = _run_json(folder)
        steps = written["unprofiled_steps_ms"]
        assert run["median_ms"] == written["median_ms"]
        assert run["unprofiled_median_ms"] == pytest.approx(statistics.median(steps), abs=1e-4)
        lo, q1, q3, hi = run["unprofiled_spread_ms"]
        assert (lo, hi) == (min(steps), max(steps)) and lo <= q1 <= q3 <= hi
        assert run["parallelism"] > 0 and run["cores_used"] > 0
        assert run["starved"] is written["starved"] and isinstance(run["starved"], bool)  # the runner judged it
        assert set(run["peak_bytes"]) == {"cpu"} and run["peak_bytes"]["cpu"] > 0
    # Speedup: the baseline's unprofiled median ÷ each run's.
    medians = [statistics.median(_run_json(runs[m])["unprofiled_steps_ms"]) for m in ("fork", "sequential")]
    assert doc["speedup"] == [pytest.approx(medians[1] / m, abs=1e-4) for m in medians]
    assert doc["speedup"][1] == 1.0
    # Ops: real ops only, every run counted, largest difference of total time first.
    ops = doc["ops"]
    names = [op["name"] for op in ops]
    assert "aten::mm" in names
    assert not [
        n for n in names if n.startswith(("step ", "branch: ")) or n in ("forward", "<forked function>")
    ]
    mm = ops[names.index("aten::mm")]
    assert mm["count"] == [6, 6]  # two products a step, three profiled steps, in either mode
    assert all(len(op["count"]) == len(op["total_us"]) == len(op["self_us"]) == 2 for op in ops)
    assert all(s <= t + 1e-6 for op in ops for s, t in zip(op["self_us"], op["total_us"]))
    spreads = [max(op["total_us"]) - min(op["total_us"]) for op in ops]
    assert spreads == sorted(spreads, reverse=True)
    # What the branches could give: each run's prediction with its sentence, and the fork run's
    # speedup against the bound on its 2 inter-op threads (the sequential baseline has none).
    assert fork["prediction"]["from"].endswith("sequential steps measured in the worker")
    assert seq["prediction"]["from"] == "this run's 3 profiled steps"
    assert fork["prediction"]["text"].startswith("could be at most ")
    vs_fork, vs_seq = doc["vs_prediction"]
    assert vs_seq is None
    assert vs_fork["threads"] == 2 and vs_fork["bound"] == fork["prediction"]["by_threads"]["2"]
    assert vs_fork["measured"] == pytest.approx(doc["speedup"][0], abs=1e-4)
    assert vs_fork["share"] == pytest.approx(vs_fork["measured"] / vs_fork["bound"], abs=1e-3)
    # The gap explained: the fork run's region measured in its trace against predicted; none for sequential.
    assert seq["gap"] is None
    gap = fork["gap"]
    assert gap["threads"] == 2 and [r["region"] for r in gap["regions"]] == ["1"]
    (region,) = gap["regions"]
    assert region["steps"] == 3 and region["measured_ms"] > 0 and region["predicted_ms"] > 0
    assert region["sequential_ms"] == pytest.approx(sum(fork["prediction"]["branch_ms"].values()), abs=1e-3)
    assert region["start_delay_ms"] >= 0 and region["idle_ms"] >= 0
    assert gap["text"].startswith("region 1 (")


@pytest.mark.slow
def test_a_trace_file_with_its_run_json_beside_it_reads_as_its_folder(runs, capsys):
    by_folder = _json(capsys, str(runs["sequential"]), str(runs["fork"]))
    by_file = _json(capsys, str(runs["sequential"] / "trace.json.gz"), str(runs["fork"] / "trace.json.gz"))
    for a, b in zip(by_folder["runs"], by_file["runs"]):
        assert {k: v for k, v in a.items() if k != "path"} == {k: v for k, v in b.items() if k != "path"}
    assert by_file["speedup"] == by_folder["speedup"] and by_file["ops"] == by_folder["ops"]


@pytest.mark.slow
def test_an_explicit_baseline(runs, capsys):
    doc = _json(capsys, str(runs["sequential"]), str(runs["fork"]), "--baseline", "1")
    assert doc["baseline"] == 1 and doc["speedup"][1] == 1.0
    medians = [r["unprofiled_median_ms"] for r in doc["runs"]]
    assert doc["speedup"][0] == pytest.approx(medians[1] / medians[0], abs=1e-4)


@pytest.mark.slow
def test_the_table_names_runs_baseline_and_ops(runs, capsys):
    assert cli(["compare", str(runs["sequential"]), str(runs["fork"])]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    seq_row = next(line for line in lines if "demo twin-mm · sequential · 1×1" in line)
    fork_row = next(line for line in lines if "demo twin-mm · fork · 2×1" in line)
    assert seq_row.startswith("0*") and "baseline" in seq_row
    assert fork_row.startswith("1 ") and "×" in fork_row
    assert "parallelism" in lines[0] and "cores used" in lines[0]
    assert any(line.strip().startswith("aten::mm") for line in lines)
    assert any(line.startswith("prediction, run 0: could be at most ") for line in lines)
    fork_line = next(line for line in lines if line.startswith("prediction, run 1: could be at most "))
    assert "no contention, no overhead assumed" in fork_line and "% of the " in fork_line
    assert any(line.startswith("the gap, run 1: region 1 (") and "predicted on 2 threads" in line for line in lines)
    # which run the speedups are against, and why that one
    assert (
        "speedups against run 0 (demo twin-mm · sequential · 1×1): "
        "the first sequential 1×1 run given (--baseline K picks another)"
    ) in lines


def test_the_table_says_the_baseline_and_a_busy_run(tmp_path, capsys):
    busy = {"cores": 2, "others_cores": 0.9, "busy": True, "loadavg_start": 2.0, "loadavg_end": 2.4}
    fork = write_timed_run(tmp_path / "fork", "fork", 2, 1, [19.0, 20.0, 21.0], load=busy)
    seq = write_timed_run(tmp_path / "seq", "sequential", 1, 1, [39.0, 40.0, 41.0], load=busy | {"others_cores": 0.1, "busy": False})
    assert cli(["compare", str(fork), str(seq)]) == 0
    lines = capsys.readouterr().out.splitlines()
    fork_row = next(line for line in lines if "fork · 2×1" in line)
    seq_row = next(line for line in lines if "sequential · 1×1" in line)
    assert "2.00× machine busy" in fork_row and "baseline" in seq_row and "busy" not in seq_row
    assert "speedups against run 1 (demo inception · sequential · 1×1): the first sequential 1×1 run given (--baseline K picks another)" in lines
    assert ("machine busy: run 0 (other processes used 0.90 of 2 cores while the steps were timed "
            "(load average 2.00 → 2.40): busy, times not comparable with a quiet run's)") in lines  # fmt: skip
    # a baseline chosen is said to be; a busy baseline marks every run compared with it
    assert cli(["compare", str(fork), str(seq), "--baseline", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "speedups against run 0 (demo inception · fork · 2×1): chosen with --baseline" in lines
    assert "0.50× machine busy" in next(line for line in lines if "sequential · 1×1" in line)
    assert cli(["compare", str(fork), str(seq), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["busy"] for r in doc["runs"]] == [True, False] and doc["baseline"] == 1


def test_plain_trace_files_compare_without_step_times(tmp_path, capsys):
    fork = write_small_trace(tmp_path / "fork.json", "fork")
    seq = write_small_trace(tmp_path / "seq.json.gz", "sequential")
    doc = _json(capsys, str(fork), str(seq))
    assert (
        doc["baseline"] == 0
    )  # no sequential 1×1 run among them (the small sequential one has 2 pool threads)
    assert [r["label"] for r in doc["runs"]] == ["fork.json · fork · 2×1", "seq.json.gz · sequential · 2×1"]
    for r in doc["runs"]:
        assert (
            r["median_ms"] is None and r["unprofiled_median_ms"] is None and r["unprofiled_spread_ms"] is None
        )
        assert r["peak_bytes"] == {"cpu": 5 * 4096}
    assert doc["speedup"] == [None, None]
    mm = next(op for op in doc["ops"] if op["name"] == "aten::mm")
    assert mm["count"] == [4, 4] and mm["total_us"] == [2800.0, 2800.0]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ")
    return err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: [d / "fork.json", d / "missing.json"], "no such file"),
        (lambda d: [d / "fork.json", d / "notes.txt"], "notes.txt"),
        (lambda d: [d / "fork.json"], "at least two"),
        (lambda d: [], "at least two"),
        (lambda d: [d / "fork.json", d / "fork.json", "--baseline", "2"], "--baseline 2"),
        (lambda d: [d / "fork.json", d / "fork.json", "--baseline", "-1"], "--baseline -1"),
        (lambda d: [d / "fork.json", d / "empty"], "folder without a complete run"),
        (lambda d: [d / "fork.json", d / "sweep"], "is a sweep folder"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys, make, message):
    write_small_trace(tmp_path / "fork.json", "fork")
    (tmp_path / "notes.txt").write_text("not a trace")
    (tmp_path / "empty").mkdir()
    write_sweep_folder(tmp_path / "sweep")
    assert cli(["compare", *map(str, make(tmp_path))]) == 2
    assert message in _error_line(capsys)
    assert capsys.readouterr().out == ""


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_screenshot_of_the_compare_view(runs, tmp_path):
    out = tmp_path / "compare.png"
    proc = branchscope("compare", str(runs["sequential"]), str(runs["fork"]), "--screenshot", str(out))
    assert proc.returncode == 0, proc.stderr
    assert _png_size(out) == DEFAULT_SIZE
    assert f"wrote {out}" in proc.stdout
