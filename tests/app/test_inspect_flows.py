"""`branchscope inspect` counts the arrows: those of the flow events and those only correlation ids
give (`"flows"` in --json, one line in the table)."""

from __future__ import annotations

import json
from pathlib import Path

from branchscope.app import cli
from branchscope.app.cmd_inspect import format_table, summary
from branchscope.profiling.trace.sources import open_job


def test_inspect_json_counts_the_two_rank_jobs_arrows(shared_traces: Path, capsys) -> None:
    assert cli.main(["inspect", str(shared_traces / "hta_two_ranks"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["flows"] == {"from_events": 0, "from_correlation": 1204 + 1154, "total": 1204 + 1154}


def test_inspect_text_says_the_arrows_in_one_line(shared_traces: Path) -> None:
    path = shared_traces / "hta_gpu_6streams_rank0.json.gz"
    text = format_table(summary(open_job([str(path)])), str(path))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("flows:")]
    assert lines == ["flows: 6,875 arrows (6,600 from flow events, 275 from launch/kernel correlation ids)"]
