"""The Compare page measures two runs paired: `branchscope speedup --jsonl` as a job of the window,
for real (the twin-mm demo, a few rounds), its result beside the button; and when it is offered."""

from __future__ import annotations

import sys

import pytest

from branchscope.app.pages.compare_page import ComparePage, paired_request
from branchscope.profiling.run.paired import PairedConfig
from branchscope.profiling.trace.records import RunRecord
from tests.builders.runs import write_run_json, write_small_trace


def _twin_mm_run(folder, mode: str, interop: int, intra: int, median: float):
    """A run folder of the twin-mm demo as the runner leaves it (small trace, complete run.json)."""
    folder.mkdir(parents=True)
    write_small_trace(folder / "trace.json.gz", mode)
    return write_run_json(folder, mode=mode, interop=interop, intra=intra, model="demo twin-mm", source="demo",
                          steps=2, warmup=1, median_ms=median, steps_ms=[median] * 3,
                          unprofiled_steps_ms=[median] * 3, trace="trace.json.gz")  # fmt: skip


def test_two_runs_of_one_model_are_offered_paired_with_the_baselines_configuration_first():
    seq = RunRecord(mode="sequential", interop=1, intra=1, model="demo twin-mm", source="demo", steps=3)
    fork = RunRecord(mode="fork", interop=2, intra=1, model="demo twin-mm", source="demo", steps=3)
    request = paired_request(seq, fork, rounds=4)
    assert not isinstance(request, str)
    assert request.user_configs == [PairedConfig("sequential", 1, 1), PairedConfig("fork", 2, 1)]
    # fork 2×1's parts need fork 1×1 beside them: one branch at a time on fork 2×1's pool, in the same worker.
    assert request.configs[2:] == [PairedConfig("fork", 1, 1, one_at_a_time=True)]
    assert request.argv() == ["--demo", "twin-mm", "--steps", "3", "--warmup", "3", "--timeout", "600.0",
                              "--dtype", "float32", "--device", "auto",
                              "--configs", "sequential:1x1,fork:2x1", "--rounds", "4"]  # fmt: skip
    other = RunRecord(mode="fork", interop=2, intra=1, model="demo inception", source="demo")
    assert paired_request(seq, other) == "needs two runs of one model"
    assert paired_request(seq, seq) == "the two runs have one configuration: nothing to pair"
    assert paired_request(seq, None) == "needs two runs with their run.json"
    ranks = RunRecord(mode="fork", interop=2, intra=1, model="demo twin-mm", source="demo", nproc=2)
    assert paired_request(seq, ranks) == "measures one process: not for distributed runs"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_the_compare_page_measures_two_runs_paired_and_shows_the_interval(window, qtbot, tmp_path):
    seq = _twin_mm_run(tmp_path / "seq", "sequential", 1, 1, 40.0)
    fork = _twin_mm_run(tmp_path / "fork", "fork", 2, 1, 20.0)
    assert window.open_trace_files([str(seq), str(fork)]) == 2
    window.runs.selectAll()
    window.compare_button.click()
    page = window.page(ComparePage)
    assert page.paired_button.isEnabled() and page.paired_label.text() == ""
    page.paired_rounds = 4
    with qtbot.waitSignal(page.speedup_controller.finished, timeout=180_000) as blocker:
        page.paired_button.click()
    record = blocker.args[0]
    command = page.speedup_controller.last_command
    assert command[command.index("--configs") + 1] == "sequential:1x1,fork:2x1"
    assert command[command.index("--demo") + 1] == "twin-mm" and command[-1] == "--jsonl"
    assert record is page.paired_result and record.measured == "in one worker" and record.rounds == 4
    assert [(c.mode, c.interop, c.steps) for c in record.configs] == [("sequential", 1, 4), ("fork", 2, 4), ("fork", 1, 4)]
    lo, hi = record.speedup[1].ci95
    text = page.paired_label.text().splitlines()
    assert text[0] == f"sequential 1×1: median {record.configs[0].median_ms:.2f} ms over 4 steps (baseline)"
    assert text[1].startswith(f"fork 2×1: median {record.configs[1].median_ms:.2f} ms over 4 steps — ")
    assert f"{lo:.2f}–{hi:.2f}×" in text[1]
    assert text[2].startswith("  in parts, over sequential 1×1: ") and "from TorchScript's plan" in text[2]
    assert any(line.startswith("measured in one worker: 4 rounds") for line in text)
    assert page.speedup_controller.active_processes() == 0
