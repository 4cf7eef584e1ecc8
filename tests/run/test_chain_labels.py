"""Issue 22, item 1: branches of five or more modules read "unknown" in the trace and "did not run" in
the legend. A chain of six modules beside a side branch, a BasicBlock and a module named in another
script, run sequential and forked: each branch's trace label and run.json's name are one value."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from branchscope.profiling import load_trace
from branchscope.profiling.trace.labels import branch_label, branch_name
from branchscope.profiling.trace.ranges import branch_order
from tests.paths import MODELS, ROOT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["chain: l0 → l1 → ... → l5", "chain.côté", "日本 → 𝔘", "a\\b", "plain"])
def test_a_branch_label_is_ascii_and_gives_its_name_back(name):
    label = branch_label(name)
    assert label.isascii() and label.isprintable()
    assert branch_name(label) == name


@pytest.mark.parametrize("mode", ["sequential", "fork"])
def test_every_branch_of_long_chains_runs_under_its_own_name(tmp_path, mode):
    out = tmp_path / mode
    cmd = [sys.executable, "-m", "branchscope.app.cli", "profile", "--model", str(MODELS / "long_chains.py"),
           "--mode", mode, "--interop", "2", "--intra", "1", "--steps", "2", "--warmup", "0", "--out", str(out),
           "--quiet"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    names = [b["name"] for b in run["branches"]]
    assert "chain: l0 → l1 → ... → l5" in names and "chain.côté" in names
    assert "block: conv1 → bn1 → conv2 → bn2" in names and "block.downsample" in names
    trace = load_trace(out / "trace.json.gz")
    assert "unknown" not in trace.names
    labelled = {branch_name(n) for n in trace.names} - {None}
    assert labelled == set(names)  # every branch ran, under the name run.json gives it
    assert sorted(branch_order(trace, names)) == sorted(names)
