"""`branchscope speedup` end to end: real workers on the smallest demo, through the CLI (a few
seconds each). What is asserted is the structure and the alternation, never a timing value."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from branchscope.profiling.trace.sweep_records import SPEEDUP_JSON
from tests.paths import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux"),
]


def speedup(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command with its temporary folders under `tmp_path/tmp`, so what it leaves there is seen."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    cmd = [sys.executable, "-m", "branchscope.app.cli", "speedup", "--demo", "twin-mm", "--warmup", "1", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _left_running(tmp_path) -> list[str]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if str(tmp_path) in cmdline:
            found.append(cmdline)
    return found


def test_in_one_worker_the_configurations_alternate_step_by_step(tmp_path):
    proc = speedup(tmp_path, "--configs", "sequential:1x1,fork:2x1", "--rounds", "6", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["measured"] == "in one worker" and data["rounds"] == 6 and data["baseline"] == 0
    # What the branches could give, from sequential steps the worker timed after the rounds
    pred = data["prediction"]
    assert pred["from"].endswith("sequential steps measured in the worker") and pred["text"].startswith("could be at most ")
    assert 1.0 <= pred["by_threads"]["2"] <= 2.0 and [r["region"] for r in pred["regions"]] == ["1"]
    # fork 1×1 for the parts, added: fork's plan one branch at a time on the 2 threads' pool
    assert [(c["mode"], c["interop"], c["intra"], c["steps"], c["added"], c["one_at_a_time"]) for c in data["configs"]] == [
        ("sequential", 1, 1, 6, None, False), ("fork", 2, 1, 6, None, False), ("fork", 1, 1, 6, "parts", True),
    ]  # fmt: skip
    for c in data["configs"]:
        assert len(c["steps_ms"]) == 6 and all(t > 0 for t in c["steps_ms"])
        assert min(c["steps_ms"]) <= c["median_ms"] <= max(c["steps_ms"])
        assert c["max_abs_diff"] is not None and c["max_abs_diff"] < 1e-3  # the plan computes the model
    # One step of each in every round, the order turned round every other round: ABBAAB…, never AAA…BBB.
    assert data["order"] == [[0, 1, 2], [2, 1, 0]] * 3
    assert data["speedup"][0] is None
    s = data["speedup"][1]
    assert set(s) == {"median", "ci95", "distinguishable", "parts"}
    lo, hi = s["ci95"]
    assert lo <= s["median"] <= hi and s["distinguishable"] == (not lo <= 1.0 <= hi)
    parts = s["parts"]
    assert parts["plan_by"] == "TorchScript's plan" and (parts["sequential"], parts["one_thread"]) == (0, 2)
    for part in ("plan", "parallel", "whole"):
        lo, hi = parts[part]["ci95"]
        assert lo <= parts[part]["median"] <= hi
    assert parts["whole"]["median"] == s["median"]  # the baseline is sequential 1×1: the same pairs
    assert data["speedup"][2]["parts"] is None  # fork 1×1 runs no branches side by side
    assert os.listdir(tmp_path / "tmp") == [] and _left_running(tmp_path) == []


def test_across_workers_each_round_is_a_fresh_worker_per_configuration(tmp_path):
    out = tmp_path / "out"
    proc = speedup(
        tmp_path, "--configs", "fork:1x1,fork:2x1", "--rounds", "2", "--steps", "2", "--no-parts", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("fork 1×1: median ") and lines[0].endswith("(baseline)")
    assert lines[1].startswith("fork 2×1: median ") and ("faster than fork 1×1" in lines[1] or "slower than" in lines[1]
                                                          or "not distinguishable from 1.0×" in lines[1])  # fmt: skip
    assert lines[2].startswith("measured across workers: 2 rounds of a fresh worker per configuration")
    assert lines[3].startswith("the branches could be at most ")  # from the fork workers' sequential steps
    assert lines[4].startswith("fork 2×1: ") and "its 2 threads could give" in lines[4]
    assert lines[5] == f"wrote {out / SPEEDUP_JSON}"
    data = json.loads((out / SPEEDUP_JSON).read_text())
    assert data["measured"] == "across workers" and data["worker_steps"] == 2
    assert data["order"] == [[0, 1], [1, 0]]
    assert [len(c["steps_ms"]) for c in data["configs"]] == [2, 2]  # one median per round
    assert data["speedup"][0] is None and len(data["speedup"][1]["ci95"]) == 2
    assert os.listdir(tmp_path / "tmp") == [] and _left_running(tmp_path) == []
