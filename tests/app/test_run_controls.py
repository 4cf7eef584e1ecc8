"""The run controls on their own: they say what to run when Run is pressed, never when a control
moves, say what the chosen mode computes with, and show the run's phases and progress (pytest-qt)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QSlider, QStyle, QStyleOptionSlider

from branchscope.app.run_controller import RunSpec
from branchscope.app.run_controls import RunControls
from branchscope.profiling.run.options import RunOptions

#: Long enough for a run to have been asked for after a change, had the controls asked for one.
QUIET_MS = 800


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


def test_no_control_the_user_moves_asks_for_a_run(controls, qtbot, tmp_path):
    """Sliders (dragged, clicked, keys), the mode and model pickers, processes, steps, the worker's
    Python: none starts a run; Run then runs what they say."""
    controls.add_model_file("/m/net.pt", ("8x3",))
    controls.set_values(demo="twin-mm", interop=1, intra=1, steps=5, mode="sequential")
    asked = _asked(controls)
    with qtbot.assertNotEmitted(controls.runRequested, wait=QUIET_MS):
        _drag(qtbot, controls.interop_slider, 2, 3)
        controls.intra_slider.setFocus()
        qtbot.keyClick(controls.intra_slider, Qt.Key.Key_Right)
        controls.mode_combo.setFocus()
        qtbot.keyClick(controls.mode_combo, Qt.Key.Key_Down)  # fork
        controls.mode_combo.activated.emit(controls.mode_combo.currentIndex())  # as a choice in the popup does
        k = _index(controls, ("file", "/m/net.pt", ("8x3",)))
        controls.model_combo.setCurrentIndex(k)
        controls.model_combo.activated.emit(k)
        for spin in (controls.steps_spin, controls.nproc_spin):
            spin.setFocus()
            qtbot.keyClick(spin, Qt.Key.Key_Up)
        controls.steps_spin.selectAll()
        qtbot.keyClicks(controls.steps_spin, "12")
        controls.python_edit.setFocus()
        qtbot.keyClicks(controls.python_edit, str(tmp_path / "python"))
        qtbot.keyClick(controls.python_edit, Qt.Key.Key_Return)
        controls.timeout_spin.setValue(30)
    assert asked == []
    with qtbot.waitSignal(controls.runRequested) as sig:
        controls.run_button.click()
    spec = sig.args[0]
    assert (spec.mode, spec.interop, spec.intra, spec.options.steps, spec.options.nproc) == ("fork", 3, 2, 12, 2)
    assert (spec.options.model, spec.options.python) == (Path("/m/net.pt"), tmp_path / "python")
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
    qtbot.keyClick(controls.model_combo, Qt.Key.Key_Down)
    assert controls.spec().options.demo == "inception" and asked == []
    # chosen from code anyway: Run is off, and asking says why instead of starting a run that fails
    controls.set_values(demo="dual-gpu")
    assert not controls.run_button.isEnabled()
    assert not controls.request_run()
    assert controls.progress.format() == "dual-gpu needs 2 CUDA devices; this machine has 1"
    assert asked == []
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


def test_the_thread_hint_says_what_the_chosen_mode_computes_with(window):
    """Sequential I×J computes with J intra-op threads (no pool: never "oversubscribed" for I×J >
    cores); fork and threads with I pool threads × J each, oversubscribed past the cores."""
    hint = window.controls.threads_hint
    window.set_controls(mode="sequential", interop=2, intra=2)
    assert hint.text() == "2 intra-op threads on 2 cores (inter-op 2 unused: sequential runs no pool)"
    window.set_controls(interop=1, intra=1)
    assert hint.text() == "1 intra-op thread on 2 cores (inter-op 1 unused: sequential runs no pool)"
    window.set_controls(mode="fork", interop=2, intra=2)
    assert hint.text() == "2 inter-op pool threads × 2 intra-op = 4 threads on 2 cores — oversubscribed"
    window.set_controls(mode="threads", interop=2, intra=1)
    assert hint.text() == "2 Python pool threads × 1 intra-op = 2 threads on 2 cores"
    window.set_controls(mode="sequential", intra=3)
    assert hint.text().startswith("3 intra-op threads on 2 cores — oversubscribed")


def test_the_thread_hint_follows_the_mode_chosen_by_the_user(controls, qtbot):
    controls.set_values(mode="sequential", interop=2, intra=2)
    assert "oversubscribed" not in controls.threads_hint.text()
    controls.mode_combo.setFocus()
    qtbot.keyClick(controls.mode_combo, Qt.Key.Key_Down)  # fork
    assert controls.threads_hint.text().endswith("= 4 threads on 2 cores — oversubscribed")
