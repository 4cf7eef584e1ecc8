"""Runs compared on a busy machine (run.json's `load.busy`): the Compare page's advice line and
`branchscope compare`'s (text and --json) end with which of the two runs it compares ran on a busy
machine, as the sweep's advice does (`advice.with_busy_note`). Run folders written by the tests, no torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from branchscope.app import cli
from branchscope.app.pages.compare_page import ComparePage
from tests.app.test_advice_window import _compare as compare_in_window
from tests.builders.runs import write_run_folder

BUSY = {"cores": 2, "others_cores": 0.84, "own_cores": 0.95, "busy": True}
QUIET = {"cores": 2, "others_cores": 0.03, "own_cores": 0.95, "busy": False}
NOTE = "sequential 1×2 ran on a busy machine: re-run it on a quiet one"


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    """A busy sequential 1×2 run (41 ms, its threads got their cores: not starved) and a quiet fork 2×1
    run (48 ms): the pair the advice compares."""
    return [
        write_run_folder(tmp_path / "seq12", "sequential", 1, 2, 41.0, load=BUSY, starved=False),
        write_run_folder(tmp_path / "fork21", "fork", 2, 1, 48.0, load=QUIET),
    ]


def test_the_compare_page_says_which_compared_run_ran_on_a_busy_machine(window, runs):
    label = compare_in_window(window, runs)
    assert label is window.page(ComparePage).advice_label
    assert label.isVisible() and "sequential 1×2 (41.0 ms) beat fork 2×1 (48.0 ms) by 1.17×" in label.text()
    assert label.text().endswith(f"({NOTE})")
    assert label.toolTip().endswith(f"; {NOTE}")  # the reason, in the tooltip


def test_compare_says_which_compared_run_ran_on_a_busy_machine_in_text_and_json(runs, capsys):
    assert cli.main(["compare", *map(str, runs)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("advice: "))
    assert line.endswith(f"({NOTE})")
    assert cli.main(["compare", *map(str, runs), "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["advice"]
    assert advice["text"] == line.removeprefix("advice: ")
    assert advice["reason"].endswith(f"; {NOTE}") and advice["winner"]["intra"] == 2


def test_quiet_runs_compared_get_no_note(tmp_path, capsys):
    quiet = [write_run_folder(tmp_path / "seq12", "sequential", 1, 2, 41.0, load=QUIET),
             write_run_folder(tmp_path / "fork21", "fork", 2, 1, 48.0)]  # fmt: skip
    assert cli.main(["compare", *map(str, quiet), "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["advice"]
    assert "beat fork 2×1" in advice["text"] and "busy machine" not in advice["text"] + advice["reason"]
