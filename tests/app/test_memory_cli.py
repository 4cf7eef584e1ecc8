"""`branchscope memory` on built traces, run folders and snapshots; broken input exits 2."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest

from branchscope.app.cli import main
from tests.builders.memory import FOUR_GPU_PROPERTIES, four_gpu_events, write_trace
from tests.builders.runs import write_run_json
from tests.builders.snapshots import Payload, two_gpu_snapshot


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["memory", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_of_four_gpu_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "t.json", four_gpu_events(), deviceProperties=FOUR_GPU_PROPERTIES)
    rc, out, err = run_cli(capsys, str(path), "--json", "--top", "2")
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert [d["device"] for d in doc["devices"]] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert [d["peak_bytes"] for d in doc["devices"]] == [600, 100, 100, 100]
    assert [a["where"] for a in doc["devices"][0]["at_peak"]] == ["aten::cat", "forward"]
    assert doc["imbalance"] == [
        {"device_type": "cuda", "heaviest": "cuda:0", "max_over_median": 6.0, "excess_bytes": 500,
         "ratio": 6.0, "ratio_of": "max/median", "lightest": "cuda:1"}
    ]


def test_text_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "t.json", four_gpu_events(), deviceProperties=FOUR_GPU_PROPERTIES)
    rc, out, _ = run_cli(capsys, str(path), "--top", "1")
    assert rc == 0
    assert "cuda:0: peak 600 B" in out and "capacity 1.00 GiB" in out
    assert "400 B" in out and "aten::cat" in out and "(2 more)" in out
    assert "cuda imbalance: cuda:0 peaks at 600 B, 6.0× the median GPU (100 B; heaviest ÷ median of 4): 500 B more." in out


def test_run_folder_reads_its_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    doc = {"traceEvents": four_gpu_events(), "deviceProperties": FOUR_GPU_PROPERTIES}
    with gzip.open(folder / "trace.json.gz", "wt") as f:
        json.dump(doc, f)
    write_run_json(folder, trace="trace.json.gz")
    rc, out, _ = run_cli(capsys, str(folder), "--json")
    assert rc == 0 and json.loads(out)["devices"][0]["peak_bytes"] == 600


def test_snapshots_are_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Snapshots named rank-N are the ranks of one job, listed in rank order whatever order they
    were named in (a shell's rank-* puts rank 10 before rank 2), in --json and in the text."""
    for r in (0, 1, 2, 10):
        (tmp_path / f"rank-{r}.pickle").write_bytes(pickle.dumps(two_gpu_snapshot()))
    shell_order = [str(tmp_path / f"rank-{r}.pickle") for r in (1, 0, 10, 2)]
    rc, out, _ = run_cli(capsys, *shell_order, "--json")
    assert rc == 0
    doc = json.loads(out)
    assert [(d["rank"], d["device"]) for d in doc["devices"]] == [
        (r, f"cuda:{k}") for r in (0, 1, 2, 10) for k in (0, 1)
    ]
    assert doc["devices"][0]["at_peak"][0]["where"] == "/home/u/train.py:41:loss"
    assert doc["imbalance"][0]["heaviest"] == "rank0/cuda:0"  # equal peaks: the first in rank order
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 10]
    rc, text, _ = run_cli(capsys, *shell_order)
    listed = [line.split(": peak ")[0].strip() for line in text.splitlines() if ": peak " in line]
    assert listed == [f"rank{r}/cuda:{k}" for r in (0, 1, 2, 10) for k in (0, 1)]


def test_sources_without_distinct_ranks_take_positions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_trace(tmp_path / "a.json", four_gpu_events())
    (tmp_path / "snap.pickle").write_bytes(pickle.dumps(two_gpu_snapshot()))
    rc, out, _ = run_cli(capsys, str(a), str(tmp_path / "snap.pickle"), "--json")
    assert rc == 0
    assert [(d["rank"], d["device"]) for d in json.loads(out)["devices"]][-2:] == [(1, "cuda:0"), (1, "cuda:1")]


def test_trace_without_memory_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace(tmp_path / "t.json", [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1}])
    rc, out, _ = run_cli(capsys, str(path))
    assert rc == 0 and "no memory events" in out


@pytest.mark.parametrize("kind", ["hostile pickle", "broken trace", "missing", "folder without a run"])
def test_broken_input_is_one_error_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "x"
    if kind == "hostile pickle":
        path.write_bytes(pickle.dumps({"device_traces": [[Payload(marker)]]}))
    elif kind == "broken trace":
        path.write_text('{"traceEvents": [')
    elif kind == "folder without a run":
        path.mkdir()
    rc, out, err = run_cli(capsys, str(path))
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not marker.exists()


def test_trace_files_of_different_jobs_are_refused_like_inspect_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_trace(tmp_path / "a.json", four_gpu_events())
    b = write_trace(tmp_path / "b.json", four_gpu_events())
    rc, out, err = run_cli(capsys, str(a), str(b))
    assert rc == 2 and err.startswith("error: not the ranks of one job") and len(err.strip().splitlines()) == 1


def test_text_names_the_largest_peak_and_the_frees_the_profiler_missed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.builders.memory import mem, op

    path = write_trace(tmp_path / "t.json", [
        op("step 1", 1, 0, 40), op("step 2", 1, 50, 40),
        mem(5, 8, 8, addr=0x10, device=-1, device_type=0),
        mem(10, 100, 100, addr=0xA0), mem(60, 100, 200, addr=0xA0), mem(85, -100, 100, addr=0xA0),
    ])
    rc, out, _ = run_cli(capsys, str(path))
    assert rc == 0
    lines = out.splitlines()
    assert lines[1] == "  largest peak: cuda:0, 200 B"
    missed = [line for line in lines if line.startswith("    the profiler missed")]
    assert missed == [
        "    the profiler missed 1 free on cuda:0: this block was allocated again at its address with no free recorded "
        "between (freed on a thread torch.profiler does not follow, such as torch's inter-op pool after a forked task "
        "ended); each counts as alive until its address is reused, and the profiler's running total, so the peak, "
        "may still count it"
    ]
    rc, out, _ = run_cli(capsys, str(path), "--json")
    doc = json.loads(out)
    assert doc["main"] == {"device": "cuda:0", "rank": None}
    assert [d["freed_unseen"] for d in doc["devices"]] == [0, 1]


def test_two_ranks_text_says_heaviest_over_lightest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.builders.memory import mem, op

    paths = []
    for r, nbytes in ((0, 5 << 30), (1, 1 << 30)):
        events = [op("step", 1, 0, 100), mem(10, nbytes, nbytes, addr=1, device=r)]
        paths.append(str(write_trace(tmp_path / f"rank-{r}.json", events, distributedInfo={"rank": r, "world_size": 2})))
    rc, out, _ = run_cli(capsys, *paths)
    assert rc == 0
    assert (
        "  cuda imbalance: rank 0 holds 5.0× rank 1 at its peak (rank0/cuda:0: 5.00 GiB, rank1/cuda:1: 1.00 GiB; "
        "heaviest ÷ lightest of 2)." in out.splitlines()
    )
