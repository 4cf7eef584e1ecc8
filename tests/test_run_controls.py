"""The run controls on their own: they say what to run and show the run's progress (pytest-qt)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from branchscope.app.run_controller import RunSpec
from branchscope.app.run_controls import RunControls


@dataclass
class Demo:
    name: str
    description: str = ""


@pytest.fixture
def controls(qtbot):
    w = RunControls([Demo("twin-mm", "two matmuls"), Demo("inception", "four branches")], cores=2)
    qtbot.addWidget(w)
    return w


def test_run_asks_for_the_spec_the_controls_show(controls, qtbot):
    assert controls.model_combo.currentData() == ("demo", "inception")  # the default demo
    assert controls.description.text() == "four branches"
    controls.set_values(demo="twin-mm", mode="fork", interop=2, intra=1, steps=3)
    with qtbot.waitSignal(controls.runRequested) as sig:
        controls.run_button.click()
    assert sig.args == [RunSpec(mode="fork", interop=2, intra=1, steps=3, demo="twin-mm")]


def test_releasing_a_slider_or_choosing_a_mode_or_model_asks_for_a_run(controls, qtbot):
    asked: list[RunSpec] = []
    controls.runRequested.connect(asked.append)
    slider = controls.intra_slider
    slider.setSliderDown(True)
    slider.setValue(3)
    assert asked == [] and controls.intra_label.text() == "3"
    slider.setSliderDown(False)  # the release
    controls.mode_combo.activated.emit(1)
    controls.add_model_file("/m/net.pt", ("8x3",))  # added and chosen, not run
    controls.model_combo.activated.emit(controls.model_combo.currentIndex())
    assert [(s.intra, s.mode, s.model, s.input_shapes) for s in asked] == [
        (3, "sequential", None, ()),
        (3, "sequential", None, ()),
        (3, "sequential", "/m/net.pt", ("8x3",)),
    ]
    assert controls.description.text() == "Model file /m/net.pt, inputs 8x3"


def test_unknown_demo_or_mode_is_refused(controls):
    with pytest.raises(ValueError, match="no demo named 'nope'; the demos are: twin-mm, inception"):
        controls.set_values(demo="nope")
    with pytest.raises(ValueError, match="no mode"):
        controls.set_values(mode="parallel")
    controls.set_values(mode="multi-stream", interop=9)
    assert controls.mode_combo.currentData() == "streams" and controls.interop_slider.value() == 9


def test_the_controls_show_the_run_going_on_and_cancel_asks_to_cancel(controls, qtbot):
    spec = RunSpec(mode="fork", interop=2, intra=1, steps=4, demo="twin-mm")
    controls.show_started(spec)
    assert controls.cancel_button.isEnabled()
    assert controls.progress.format() == "twin-mm · fork: starting worker…"
    assert controls.progress.maximum() == 4
    controls.show_progress(2, 4)
    assert (controls.progress.value(), controls.progress.format()) == (2, "step 2 of 4")
    with qtbot.waitSignal(controls.cancelRequested):
        controls.cancel_button.click()
    controls.show_idle("cancelled")
    assert not controls.cancel_button.isEnabled() and controls.progress.format() == "cancelled"
    controls.show_idle("done")
    assert controls.progress.value() == controls.progress.maximum() == 1


def test_multi_stream_offered_only_with_cuda(controls):
    controls.set_streams_enabled(False, "no NVIDIA driver")
    item = controls.mode_combo.model().item(2)
    assert not item.isEnabled() and item.toolTip() == "no NVIDIA driver"
    controls.set_streams_enabled(True, "")
    assert item.isEnabled() and controls.mode_combo.toolTip() == ""
