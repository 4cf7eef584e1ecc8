"""The first screen and the left panel (issue 22, items 3 and 4): the window's first run is
sequential 1×1 and, once, the same model forked 2×1 follows, the pair selected for Compare; the run
controls follow the run or folder shown, say when it came from disk, and after a failed run name
what is still shown (pytest-qt, offscreen, the fake runner: no torch)."""

from __future__ import annotations

import json

from branchscope.app.pages.compare_page import ComparePage
from branchscope.app.pages.run_page import RunPage
from branchscope.app.pages.sweep_page import SweepPage
from branchscope.profiling.trace.sweep_records import SWEEP_JSON
from tests.app.test_distributed_open import _distributed_folder
from tests.builders.runs import write_run_folder, write_run_json, write_small_trace, write_sweep_folder

#: Long enough for a run to have been asked for, had there been one.
QUIET_MS = 800


def _specs(window) -> list[tuple[str, int, int]]:
    return [(e.spec.mode, e.spec.interop, e.spec.intra) for e in window.run_list.entries]


def _controls(window) -> tuple:
    """What the left panel says: model, mode, threads, steps, processes."""
    c = window.controls
    return (
        c.model_combo.currentData(),
        c.mode_combo.currentData(),
        (c.interop_slider.value(), c.intra_slider.value()),
        c.steps_spin.value(),
        c.nproc_spin.value(),
    )


def _value_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _raising(window, name: str = "raising") -> None:
    """Choose the fake runner's model that fails (fixtures/gui/fake_runner.py): "raising" raises,
    "nobranches" has no branches to fork."""
    combo = window.controls.model_combo
    combo.addItem(f"demo: {name}", ("demo", name))
    combo.setCurrentIndex(combo.count() - 1)


def test_the_first_run_is_sequential_1x1_then_fork_2x1_once_with_the_pair_selected(window, qtbot):
    # the defaults, on 2 cores: not 2×2 under an "oversubscribed" warning
    assert _controls(window) == (("demo", "inception"), "sequential", (1, 1), 5, 1)
    assert "oversubscribed" not in window.controls.threads_hint.text()
    assert window.start_first_run()
    qtbot.waitUntil(lambda: len(window.run_list.entries) == 2 and not window.controller.is_running(), timeout=40_000)
    assert _specs(window) == [("sequential", 1, 1), ("fork", 2, 1)]
    args = window.controller.last_command
    assert (_value_after(args, "--mode"), _value_after(args, "--interop"), _value_after(args, "--intra")) == ("fork", "2", "1")
    assert window.run_list.entries[1].spec.options == window.run_list.entries[0].spec.options  # the same model, steps, Python
    # both selected: one click puts them side by side
    assert window.lifecycle.lesson_pair == (window.run_list.entries[0], window.run_list.entries[1])
    assert window.runs.selected_rows() == [0, 1] and window.compare_button.isEnabled()
    window.compare_button.click()
    assert window.tabs.currentWidget() is window.page(ComparePage)
    assert len(window.page(ComparePage).workspace.shown) == 2
    assert window.controls.shown_label.whole_text() == "shown: #2 inception · fork · 2×1"  # the Run page's run
    # once: a sequential 1×1 run after that is not followed
    window.set_controls(mode="sequential", interop=1, intra=1)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()
    with qtbot.assertNotEmitted(window.controller.started, wait=QUIET_MS):
        pass
    assert len(window.run_list.entries) == 3 and not window.controller.is_running()


def test_a_first_run_the_command_line_set_otherwise_or_that_failed_is_not_followed(window, qtbot):
    window.set_controls(mode="fork", interop=2, intra=2)  # as --mode fork --interop 2 --intra 2 would
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        assert window.start_first_run()
    with qtbot.assertNotEmitted(window.controller.started, wait=QUIET_MS):
        pass
    assert _specs(window) == [("fork", 2, 2)]


def test_a_failed_first_run_starts_nothing_more_and_the_panel_says_nothing_is_shown(window, qtbot):
    _raising(window)
    with qtbot.waitSignal(window.controller.failed, timeout=20_000):
        window.start_first_run()
    with qtbot.assertNotEmitted(window.controller.started, wait=QUIET_MS):
        pass
    assert window.run_list.entries == []
    assert window.controls.shown_label.whole_text().startswith("nothing shown yet: the run of raising sequential 1×1 failed")
    window.message_box.close()


def test_selecting_a_1x1_run_sets_the_controls_to_it_without_starting_a_run(window, qtbot):
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()  # sequential 1×1, 5 steps
    window.set_controls(mode="fork", interop=2, intra=2, steps=3)
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()
    assert _controls(window) == (("demo", "inception"), "fork", (2, 2), 3, 1)
    assert window.controls.shown_label.whole_text() == "shown: #2 inception · fork · 2×2"
    with qtbot.assertNotEmitted(window.controller.started, wait=QUIET_MS):
        with qtbot.waitSignal(window.entryShown, timeout=60_000):  # its trace may be read again, on a busy machine
            window.runs.setCurrentIndex(window.runs_table.index(0, 0))
        assert _controls(window) == (("demo", "inception"), "sequential", (1, 1), 5, 1)
    assert window.controls.shown_label.whole_text() == "shown: #1 inception · sequential · 1×1"
    assert len(window.run_list.entries) == 2 and not window.controller.is_running()


def test_an_opened_run_folder_or_distributed_run_shows_its_own_model_and_says_from_disk(window, qtbot, tmp_path):
    with qtbot.assertNotEmitted(window.controller.started, wait=QUIET_MS):
        assert window.open_trace_files([str(_distributed_folder(tmp_path / "runs" / "D"))]) == 1
        assert _controls(window) == (("demo", "twin-mm"), "fork", (2, 1), 5, 2)
        assert window.controls.shown_label.whole_text() == "opened from disk: runs/D — #1 twin-mm · fork · 2×1 · 2 processes"
        seq = write_run_folder(tmp_path / "runs" / "seq", "sequential", 1, 1, 40.0, steps=7)
        assert window.open_trace_files([str(seq)]) == 1
        assert _controls(window) == (("demo", "inception"), "sequential", (1, 1), 7, 1)
        assert window.controls.shown_label.whole_text() == "opened from disk: runs/seq — #2 inception · sequential · 1×1"


def test_a_model_file_named_by_a_run_json_is_not_chosen_and_the_panel_says_so(window, tmp_path):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    write_small_trace(folder / "trace.json.gz", "fork")
    write_run_json(folder, mode="fork", interop=2, intra=1, model=str(tmp_path / "net.py"), source="py",
                   trace="trace.json.gz", median_ms=20.0, steps_ms=[20.0], unprofiled_steps_ms=[20.0])  # fmt: skip
    models = window.controls.model_combo.count()
    assert window.open_trace_files([str(folder)]) == 1
    # a path from run.json is never added to what Run runs
    assert window.controls.model_combo.count() == models
    assert _controls(window)[:3] == (("demo", "inception"), "fork", (2, 1))
    text = window.controls.shown_label.whole_text()
    assert text.startswith("opened from disk: ") and "net.py · fork · 2×1" in text
    assert text.endswith("not a run of demo: inception (what Run runs)")


def test_a_plain_trace_file_shows_its_name_and_is_not_a_run_of_the_chosen_model(window, tmp_path):
    trace = write_small_trace(tmp_path / "mine.json", "fork")
    assert window.open_trace_files([str(trace)]) == 1
    text = window.controls.shown_label.whole_text()
    assert text.startswith("opened from disk: mine.json — #1 a trace file (mine · fork")
    assert text.endswith("not a run of demo: inception (what Run runs)")
    assert window.controls.shown_label.isVisible()


def test_an_opened_sweep_shows_its_model_and_says_from_disk(window, qtbot, tmp_path):
    sweep = write_sweep_folder(tmp_path / "sweeps" / "s1")
    record = json.loads((sweep / SWEEP_JSON).read_text())
    (sweep / SWEEP_JSON).write_text(json.dumps({**record, "model": "demo twin-mm", "demo": "twin-mm"}))
    with qtbot.assertNotEmitted(window.controller.started, wait=QUIET_MS):
        assert window.open_trace_files([str(sweep)]) == 1
    assert window.tabs.currentWidget() is window.page(SweepPage)
    assert window.controls.shown_label.whole_text() == "opened from disk: sweeps/s1 — a sweep of twin-mm"
    assert _controls(window)[0] == ("demo", "twin-mm")


def test_after_a_failed_run_the_panel_names_the_run_still_shown(window, qtbot):
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()
    _raising(window)
    window.set_controls(mode="fork", interop=2, intra=1)
    with qtbot.waitSignal(window.controller.failed, timeout=20_000):
        window.start_run()
    assert window.message_box.detailedText()  # the model's traceback: Show Details… holds it
    window.message_box.close()
    # the timeline still shows the sequential run, and the panel says so and what failed; the
    # controls stay as they were set: the next Run tries the failed run's model again
    assert window.page(RunPage).timeline.trace is window.run_list.entries[0].trace
    assert _controls(window) == (("demo", "raising"), "fork", (2, 1), 5, 1)
    assert window.controls.shown_label.whole_text() == (
        "shown: #1 inception · sequential · 1×1 (the run of raising fork 2×1 failed)"
        " — not a run of demo: raising (what Run runs)"
    )


def test_a_model_without_branches_in_fork_mode_is_a_plain_note_and_stays_chosen(window, qtbot):
    from PySide6.QtWidgets import QMessageBox

    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.start_run()  # inception sequential 1×1: listed and shown
    _raising(window, "nobranches")
    window.set_controls(mode="fork", interop=2, intra=1)
    with qtbot.waitSignal(window.controller.failed, timeout=20_000):
        window.start_run()
    box = window.message_box
    # an expected outcome: why, and which modes can run it; no traceback, no error icon
    assert box.detailedText() == "" and box.informativeText() == ""
    assert box.icon() == QMessageBox.Icon.Information
    assert box.text().startswith("Fork mode needs parallel branches")
    assert "sequential runs any model" in box.text() and "threads runs" in box.text()
    box.close()
    assert len(window.run_list.entries) == 1
    assert _controls(window)[:3] == (("demo", "nobranches"), "fork", (2, 1))
    # switching to sequential and pressing Run runs the chosen model, not the one shown
    window.controls.mode_combo.setCurrentIndex(window.controls.mode_combo.findData("sequential"))
    with qtbot.waitSignal(window.lifecycle.opened, timeout=20_000):
        window.controls.run_button.click()
    assert window.run_list.entries[-1].spec.options.demo == "nobranches"
    assert window.run_list.entries[-1].spec.mode == "sequential"
