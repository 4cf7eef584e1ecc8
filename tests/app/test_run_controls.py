"""The run controls on their own: they say what to run, once the user pauses, and show the run's
phases and progress (pytest-qt)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QSlider, QStyle, QStyleOptionSlider

from branchscope.app.run_controller import RunSpec
from branchscope.app.run_controls import RERUN_DELAY_MS, RunControls
from branchscope.profiling.run.options import RunOptions

#: Long enough for a debounced run to have been asked for, had there been one.
QUIET_MS = RERUN_DELAY_MS + 400


@dataclass
class Demo:
    name: str
    description: str = ""
    requires_cuda_devices: int = 0


@pytest.fixture
def controls(qtbot):
    demos = [Demo("twin-mm", "two matmuls"), Demo("dual-gpu", "two GPUs", 2), Demo("inception", "four branches")]
    w = RunControls(demos, cores=2)
    qtbot.addWidget(w)
    w.resize(420, 640)
    w.show()
    qtbot.waitExposed(w)
    return w


def _index(controls, data: tuple) -> int:
    """The model picker's row holding `data`."""
    combo = controls.model_combo
    return next(k for k in range(combo.count()) if tuple(combo.itemData(k)) == data)


def _asked(controls) -> list[RunSpec]:
    asked: list[RunSpec] = []
    controls.runRequested.connect(asked.append)
    return asked


def _handle(slider: QSlider) -> QPoint:
    opt = QStyleOptionSlider()
    slider.initStyleOption(opt)
    rect = slider.style().subControlRect(QStyle.ComplexControl.CC_Slider, opt, QStyle.SubControl.SC_SliderHandle, slider)
    return rect.center()


def _x_of(slider: QSlider, value: int) -> int:
    """Where the handle's centre is at `value` (the style's own mapping)."""
    opt = QStyleOptionSlider()
    slider.initStyleOption(opt)
    style, cc = slider.style(), QStyle.ComplexControl.CC_Slider
    groove = style.subControlRect(cc, opt, QStyle.SubControl.SC_SliderGroove, slider)
    handle = style.subControlRect(cc, opt, QStyle.SubControl.SC_SliderHandle, slider)
    span = groove.width() - handle.width()
    return groove.x() + QStyle.sliderPositionFromValue(slider.minimum(), slider.maximum(), value, span) + handle.width() // 2


def _drag(qtbot, slider: QSlider, *values: int) -> None:
    """Press the handle, move it through `values` (holding the button), release it."""
    y = _handle(slider).y()
    qtbot.mousePress(slider, Qt.MouseButton.LeftButton, pos=_handle(slider))
    for v in values:
        qtbot.mouseMove(slider, QPoint(_x_of(slider, v), y))
        assert slider.value() == v and slider.isSliderDown()
    qtbot.mouseRelease(slider, Qt.MouseButton.LeftButton, pos=QPoint(_x_of(slider, values[-1]), y))


def test_run_asks_for_the_spec_the_controls_show(controls, qtbot):
    assert controls.model_combo.currentData() == ("demo", "inception")  # the default demo
    assert controls.description.text() == "four branches"
    controls.set_values(demo="twin-mm", mode="fork", interop=2, intra=1, steps=3, timeout=90)
    with qtbot.waitSignal(controls.runRequested) as sig:
        controls.run_button.click()
    assert sig.args == [RunSpec(mode="fork", interop=2, intra=1, options=RunOptions(steps=3, demo="twin-mm", timeout=90.0))]


def test_dragging_2x2_to_1x1_asks_once_for_1x1_after_the_pause(controls, qtbot):
    controls.set_values(interop=2, intra=2)
    asked = _asked(controls)
    with qtbot.waitSignal(controls.runRequested, timeout=5000):
        _drag(qtbot, controls.interop_slider, 1)
        _drag(qtbot, controls.intra_slider, 1)
        assert asked == [] and controls.pending()
    assert [(s.interop, s.intra) for s in asked] == [(1, 1)]
    with qtbot.assertNotEmitted(controls.runRequested, wait=QUIET_MS):
        pass
    assert len(asked) == 1


def test_no_run_while_a_slider_is_held_down_and_none_with_an_intermediate_value(controls, qtbot):
    controls.set_values(interop=1, intra=1)
    asked = _asked(controls)
    slider = controls.interop_slider
    y = _handle(slider).y()
    qtbot.mousePress(slider, Qt.MouseButton.LeftButton, pos=_handle(slider))
    for v in (2, 3, 4, 3):
        qtbot.mouseMove(slider, QPoint(_x_of(slider, v), y))
    with qtbot.assertNotEmitted(controls.runRequested, wait=QUIET_MS):
        pass  # held well past the delay: nothing
    assert slider.isSliderDown() and slider.value() == 3
    with qtbot.waitSignal(controls.runRequested, timeout=5000) as sig:
        qtbot.mouseRelease(slider, Qt.MouseButton.LeftButton, pos=QPoint(_x_of(slider, 3), y))
    assert sig.args[0].interop == 3 and len(asked) == 1


def test_keyboard_steps_on_sliders_steps_and_mode_ask_once_with_the_final_values(controls, qtbot):
    controls.set_values(interop=1, intra=1, steps=5, mode="sequential")
    asked = _asked(controls)
    with qtbot.waitSignal(controls.runRequested, timeout=5000):
        controls.interop_slider.setFocus()
        qtbot.keyClick(controls.interop_slider, Qt.Key.Key_Right)
        qtbot.keyClick(controls.interop_slider, Qt.Key.Key_Right)
        qtbot.keyClick(controls.intra_slider, Qt.Key.Key_Right)
        for _ in range(3):
            qtbot.keyClick(controls.steps_spin, Qt.Key.Key_Up)
        qtbot.keyClick(controls.mode_combo, Qt.Key.Key_Down)  # fork
        qtbot.keyClick(controls.mode_combo, Qt.Key.Key_Down)  # streams
        qtbot.keyClick(controls.mode_combo, Qt.Key.Key_Up)  # fork
    assert [(s.interop, s.intra, s.options.steps, s.mode) for s in asked] == [(3, 2, 8, "fork")]
    with qtbot.assertNotEmitted(controls.runRequested, wait=QUIET_MS):
        pass


def test_typing_the_steps_asks_once_for_the_typed_number(controls, qtbot):
    controls.set_values(steps=5)
    asked = _asked(controls)
    spin = controls.steps_spin
    with qtbot.waitSignal(controls.runRequested, timeout=5000):
        spin.selectAll()
        qtbot.keyClicks(spin, "12")
    assert [s.options.steps for s in asked] == [12]


def test_changes_back_to_where_they_started_and_values_set_from_code_ask_for_nothing(controls, qtbot):
    controls.set_values(interop=2, intra=1)
    asked = _asked(controls)
    with qtbot.assertNotEmitted(controls.runRequested, wait=QUIET_MS):
        _drag(qtbot, controls.interop_slider, 3, 2)  # and back
        controls.set_values(steps=7, mode="fork")
        controls.intra_slider.setValue(2)  # from code
        controls.timeout_spin.setValue(30)  # the timeout alone is no reason to run
        controls.add_model_file("/m/net.pt", ("8x3",))  # added and chosen, not run
    assert asked == []


def test_run_now_drops_the_pending_change(controls, qtbot):
    asked = _asked(controls)
    qtbot.keyClick(controls.interop_slider, Qt.Key.Key_Right)  # from the default 1×1
    assert controls.pending()
    controls.run_button.click()
    assert len(asked) == 1 and not controls.pending()
    with qtbot.assertNotEmitted(controls.runRequested, wait=QUIET_MS):
        pass


def test_choosing_a_model_asks_for_a_run(controls, qtbot):
    controls.add_model_file("/m/net.pt", ("8x3",))
    controls.set_values(demo="twin-mm")
    k = _index(controls, ("file", "/m/net.pt", ("8x3",)))
    with qtbot.waitSignal(controls.runRequested, timeout=5000) as sig:
        controls.model_combo.setCurrentIndex(k)
        controls.model_combo.activated.emit(k)  # as a choice in the popup does
    assert (sig.args[0].options.model, sig.args[0].options.input_shapes) == (Path("/m/net.pt"), ("8x3",))
    assert controls.description.text() == "Model file /m/net.pt, inputs 8x3"


def test_the_timeout_goes_to_the_runner(controls, tmp_path):
    controls.timeout_spin.setValue(45)
    args = controls.spec().runner_arguments(tmp_path)
    assert args[args.index("--timeout") + 1] == "45.0"
    assert RunSpec(mode="fork", interop=1, intra=1).request(tmp_path).options.timeout == 600.0  # unset: the runner's default


def test_unknown_demo_or_mode_is_refused(controls):
    with pytest.raises(ValueError, match="no demo named 'nope'; the demos are: twin-mm, dual-gpu, inception"):
        controls.set_values(demo="nope")
    with pytest.raises(ValueError, match="no mode"):
        controls.set_values(mode="parallel")
    controls.set_values(mode="multi-stream", interop=9)
    assert controls.mode_combo.currentData() == "streams" and controls.interop_slider.value() == 9


def test_a_demo_this_machine_cannot_run_is_greyed_out_with_the_reason(controls, qtbot):
    item = controls.model_combo.model().item(_index(controls, ("demo", "dual-gpu")))
    assert not item.isEnabled() and "checking" in item.toolTip()  # not known yet
    controls.set_cuda_devices(1)
    assert not item.isEnabled()
    assert item.text() == "demo: dual-gpu (needs 2 CUDA devices)"
    assert item.toolTip().startswith("dual-gpu needs 2 CUDA devices; this machine has 1")
    # the keyboard skips it
    controls.set_values(demo="twin-mm")
    asked = _asked(controls)
    with qtbot.waitSignal(controls.runRequested, timeout=5000):
        qtbot.keyClick(controls.model_combo, Qt.Key.Key_Down)
    assert [s.options.demo for s in asked] == ["inception"]
    # chosen from code anyway: Run is off, and asking says why instead of starting a run that fails
    controls.set_values(demo="dual-gpu")
    assert not controls.run_button.isEnabled()
    assert not controls.request_run()
    assert controls.progress.format() == "dual-gpu needs 2 CUDA devices; this machine has 1"
    assert len(asked) == 1
    controls.set_cuda_devices(2)
    assert item.isEnabled() and item.text() == "demo: dual-gpu" and item.toolTip() == "two GPUs"
    assert controls.run_button.isEnabled() and controls.request_run() and asked[-1].options.demo == "dual-gpu"


def test_the_controls_show_the_phase_ticking_then_the_steps(controls, qtbot):
    spec = RunSpec(mode="fork", interop=2, intra=1, options=RunOptions(steps=4, demo="twin-mm"))
    controls.show_started(spec)
    assert controls.cancel_button.isEnabled()
    assert re.fullmatch(r"twin-mm · fork: starting worker… \d+\.\d s", controls.progress.format())
    controls.show_phase("timing")
    first = controls.progress.format()
    assert re.fullmatch(r"timing steps… \d+\.\d s", first)
    qtbot.waitUntil(lambda: controls.progress.format() != first, timeout=5000)  # it ticks
    assert controls.progress.format().startswith("timing steps… ")
    controls.show_phase("something new")
    assert controls.progress.format().startswith("something new… ")
    controls.show_progress(2, 4)
    assert (controls.progress.value(), controls.progress.format()) == (2, "step 2 of 4")
    assert not controls.phase_timer.isActive()  # the steps replace the ticking
    with qtbot.waitSignal(controls.cancelRequested):
        controls.cancel_button.click()
    controls.show_idle("cancelled")
    assert not controls.cancel_button.isEnabled() and controls.progress.format() == "cancelled"
    controls.show_idle("done")
    assert controls.progress.value() == controls.progress.maximum() == 1


def test_modes_that_need_cuda_are_offered_only_with_it(controls):
    controls.set_cuda_available(False, "no NVIDIA driver")
    item = controls.mode_combo.model().item(controls.mode_combo.findData("streams"))
    assert not item.isEnabled() and item.toolTip() == "multi-stream needs CUDA: no NVIDIA driver"
    assert controls.mode_combo.toolTip() == "multi-stream: needs CUDA: no NVIDIA driver"
    others = [controls.mode_combo.model().item(k) for k in range(controls.mode_combo.count()) if k != controls.mode_combo.findData("streams")]
    assert all(i.isEnabled() for i in others)  # sequential and fork need no CUDA
    controls.set_cuda_available(True, "")
    assert item.isEnabled() and controls.mode_combo.toolTip() == ""


def test_the_thread_hint_counts_in_words(window):
    window.set_controls(interop=1, intra=1)
    assert window.controls.threads_hint.text() == "1 × 1 = 1 thread on 2 cores"
    window.set_controls(interop=2, intra=2)
    assert window.controls.threads_hint.text() == "2 × 2 = 4 threads on 2 cores — oversubscribed when forked"
