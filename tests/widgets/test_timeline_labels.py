"""The names drawn on the timeline's event blocks (issue 22, item 7): a block says what tells it
apart from its neighbours in the room it has (`timeline_labels.block_label`)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics

from branchscope.profiling.trace.model import Lane, build_trace
from branchscope.widgets.time_axis import GUTTER
from branchscope.widgets.timeline import TimelineView
from branchscope.widgets.timeline_labels import (
    bare_function,
    block_label,
    elide_keeping_end,
    label_forms,
    sibling_prefix,
)
from tests.gui_helpers import show

#: Two sibling branches of inception_v3's Mixed_7b as the trace labels them.
DBL = "branch: branch3x3dbl_1 -> branch3x3dbl_2 -> branch3x3dbl_3a"
PLAIN = "branch: branch3x3_1 -> branch3x3_2a"


@pytest.fixture
def fm(qtbot) -> QFontMetrics:
    return QFontMetrics(QFont())


def test_label_forms_drop_the_prefix_then_the_chain_after_its_first_modules():
    assert label_forms(DBL) == [
        "branch: branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3a",
        "branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3a",
        "branch3x3dbl_1 → branch3x3dbl_2 → …",
        "branch3x3dbl_1 → …",
        "branch3x3dbl_1",
    ]
    assert label_forms("branch: pool") == ["branch: pool", "pool"]
    assert label_forms("branch: a → b") == ["branch: a → b", "a → b", "a → …", "a"]  # a name as run.json says it
    assert label_forms("aten::convolution") == ["aten::convolution", "convolution"]
    assert label_forms("autograd::engine::evaluate_function: AddmmBackward0") == [
        "autograd::engine::evaluate_function: AddmmBackward0",
        "evaluate_function: AddmmBackward0",
    ]
    assert label_forms("step 3") == ["step 3"] and label_forms("a b::c") == ["a b::c"]
    assert label_forms("branch: ") == ["branch: "]
    assert label_forms("branch: 分支 -> ветвь") == ["branch: 分支 → ветвь", "分支 → ветвь", "分支 → …", "分支"]


def test_block_label_says_the_most_that_fits_and_keeps_a_long_names_end(fm):
    w = fm.horizontalAdvance
    for form in label_forms(DBL):  # each form where exactly it fits
        assert block_label(DBL, w(form), fm) == form
    # a room for less than the first module: it is cut in the middle, keeping more of its end
    room = w("bra…dbl_1")
    assert block_label(DBL, room, fm) == "bra…dbl_1"
    assert elide_keeping_end("branch3x3dbl_1", room, fm) == "bra…dbl_1"
    assert fm.elidedText("branch3x3dbl_1", Qt.TextElideMode.ElideRight, room).startswith("branch")  # as before
    # siblings read apart in every room that holds 8 characters
    for room in range(w("bra…dbl_1"), w(PLAIN) + 40, 2):
        a, b = block_label(DBL, room, fm), block_label(PLAIN, room, fm)
        assert a != b and w(a) <= room and w(b) <= room, (room, a, b)
    assert block_label(DBL, w("…"), fm) == ""  # nothing readable fits: nothing drawn
    # an op's name without its namespace where the whole does not fit, then cut at its right
    assert block_label("aten::convolution", w("aten::convolution"), fm) == "aten::convolution"
    assert block_label("aten::convolution", w("aten::conv…"), fm) == "convolution"
    assert block_label("aten::addmm", w("aten::conv…"), fm) == "addmm"  # not "aten::…" for both
    right = Qt.TextElideMode.ElideRight
    assert block_label("aten::convolution", w("convol…"), fm) == fm.elidedText("convolution", right, w("convol…"))
    assert block_label("step 3", w("step…"), fm) == fm.elidedText("step 3", right, w("step…")) != ""
    assert block_label("aten::convolution", w("a"), fm) == ""
    # Fewer than three characters say nothing of a block: nothing drawn, not "…1" or "s…" (issue 35)
    assert block_label("step 3", w("st…"), fm) == "" and block_label("step 3", w("s…"), fm) == ""
    assert block_label(DBL, w("…_1"), fm) == "" and block_label(DBL, w("b…_1"), fm) == "b…_1"


def _siblings_trace():
    """The two siblings one after the other on a pool thread, then side by side on two (and a
    moment on the main thread long after, so the view may zoom out that far)."""
    lanes = [Lane(0, "cpu", 1, 1, "main", "main"), Lane(1, "cpu", 1, 11, "pool", "interop"),
             Lane(2, "cpu", 1, 12, "pool", "interop")]  # fmt: skip
    names = [DBL, PLAIN, "later"]
    events = [(1, 0, 0, 8_000), (1, 1, 8_000, 8_000), (1, 0, 20_000, 8_000), (2, 1, 20_000, 8_000),
              (0, 2, 1_000_000, 10)]  # fmt: skip
    return build_trace(
        path="siblings", start_ns=np.array([e[2] for e in events]), dur_ns=np.array([e[3] for e in events]),
        lane=np.array([e[0] for e in events]), name_id=np.array([e[1] for e in events]),
        cat_id=np.zeros(len(events)), names=names, cats=["user_annotation"], lanes=lanes,
    )  # fmt: skip


def test_sibling_branch_blocks_are_labelled_apart_on_screen(qtbot):
    view = show(qtbot, TimelineView(), 1200, 400)
    trace = _siblings_trace()
    view.set_trace(trace)
    block_px = 90  # each 8 µs block this wide: room for a few characters of a name
    start = trace.span()[0]
    view.set_time_range(start, start + round(8_000 * view.plot_width() / block_px))
    view.grab()  # a frame painted
    lo, hi = view.time_range()
    px_per_ns = view.plot_width() / (hi - lo)
    assert 8_000 * px_per_ns == pytest.approx(block_px, abs=1)
    fm = view.painter.label_fm
    drawn = view.painter.drawn_labels
    assert len(drawn) == 4, drawn

    def label_in(t_ns: int) -> list[str]:
        x_lo = GUTTER + (t_ns - lo) * px_per_ns
        return sorted({t for x, _y, t in drawn if x_lo <= x < x_lo + block_px})

    first, second, side_by_side = label_in(0), label_in(8_000), label_in(20_000)
    assert len(first) == len(second) == 1 and first != second  # one after the other
    assert len(side_by_side) == 2  # and on two threads at once
    assert set(side_by_side) == {first[0], second[0]}
    for text in (first[0], second[0]):
        assert not text.startswith("branch:") and fm.horizontalAdvance(text) <= block_px
    # what the painter drew before: both names cut at their right, the same text
    room = (block_px - 6) // 8 * 8
    assert fm.elidedText(DBL, Qt.TextElideMode.ElideRight, room) == fm.elidedText(PLAIN, Qt.TextElideMode.ElideRight, room)


# ---- what sibling branches share, dropped where the room is short (issue 35, item 12) ----------

#: Inception's four branches as a run's trace names them.
INCEPTION = ["branch: branch1x1", "branch: branch5x5_1 -> branch5x5_2",
             "branch: branch3x3dbl_1 -> branch3x3dbl_2 -> branch3x3dbl_3", "branch: branch_pool"]  # fmt: skip


def test_sibling_prefix_is_the_word_the_branches_share():
    assert sibling_prefix([*INCEPTION, "aten::conv2d", "step 0"]) == "branch"
    assert sibling_prefix([DBL, PLAIN]) == "branch"  # not "branch3x3": what is left must tell them apart
    assert sibling_prefix(["branch: head0", "branch: head1"]) == "head"
    assert sibling_prefix(["branch: branch1x1"]) == "" and sibling_prefix(["aten::mm", "aten::add"]) == ""
    assert sibling_prefix(["branch: 1a", "branch: 1b"]) == ""
    assert label_forms("branch: branch_pool", "branch") == ["branch: branch_pool", "branch_pool", "pool"]
    assert label_forms(DBL, "branch")[-2:] == ["branch3x3dbl_1", "3x3dbl_1"]
    assert label_forms("branch: branch", "branch") == ["branch: branch", "branch"]  # nothing would be left
    assert label_forms("aten::convolution", "branch") == ["aten::convolution", "convolution"]


def test_a_narrow_branch_block_shows_what_tells_it_apart_not_b_ellipsis_1(fm):
    w = fm.horizontalAdvance
    assert block_label("branch: branch1x1", w("1x1"), fm, "branch") == "1x1"  # was "b…1"
    assert block_label("branch: branch1x1", w("1x1"), fm) == elide_keeping_end("branch1x1", w("1x1"), fm)
    assert block_label(DBL, w("3x3dbl_1"), fm, "branch") == "3x3dbl_1"  # was "bra…dbl_1"
    assert block_label("branch: branch_pool", w("pool"), fm, "branch") == "pool"
    labels = {block_label(name, w("3x3dbl_1"), fm, "branch") for name in INCEPTION}
    assert labels == {"1x1", "5x5_1", "3x3dbl_1", "pool"}


@pytest.mark.parametrize("name", [*INCEPTION, DBL, "aten::max_pool2d_with_indices", "cudaLaunchKernel",
                                  "autograd::engine::evaluate_function: ConvolutionBackward0"])  # fmt: skip
def test_no_label_is_cut_below_12_characters_where_12_fit(fm, name):
    w = fm.horizontalAdvance
    shortest = label_forms(name, "branch")[-1]
    for room in range(w("M" * 12), w(name) + 8, 3):
        text = block_label(name, room, fm, "branch")
        assert w(text) <= room and text, (room, text)
        assert text in label_forms(name, "branch") or len(text) >= 12, (room, text)
        assert len(text) >= min(12, len(shortest)), (room, text)


def test_the_timeline_labels_inception_branches_by_what_tells_them_apart(qtbot):
    lanes = [Lane(0, "cpu", 1, 11, "pool", "interop")]
    starts = [0, 10_000, 20_000, 30_000, 1_000_000]  # and a moment long after, for the view to zoom in from
    trace = build_trace(
        path="inception", start_ns=np.array(starts), dur_ns=np.array([8_000] * 4 + [10]), lane=np.zeros(5),
        name_id=np.arange(5), cat_id=np.zeros(5), names=[*INCEPTION, "later"], cats=["user_annotation"],
        lanes=lanes,
    )  # fmt: skip
    view = show(qtbot, TimelineView(), 1200, 300)
    view.set_trace(trace)
    fm = view.painter.label_fm
    block_px = fm.horizontalAdvance("3x3dbl_1") + 8 + 6  # room for the distinctive part, not "branch…"
    view.set_time_range(0, round(8_000 * view.plot_width() / block_px))
    view.grab()
    drawn = sorted(text for _x, _y, text in view.painter.drawn_labels)
    assert drawn == sorted(["1x1", "5x5_1", "3x3dbl_1", "pool"]), drawn


def test_a_kernel_block_says_its_function_not_void_at_native(fm):
    kernel = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")  # fmt: skip
    assert label_forms(kernel) == [kernel, "vectorized_elementwise_kernel"]
    assert bare_function("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 2>(float*)") == (
        "CatArrayBatchedCopy"
    )
    assert bare_function("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long)") == (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    )
    assert bare_function("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD"
    cutlass = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_tn_align1>(cutlass_80_tensorop::Params)"
    assert bare_function(cutlass) == "cutlass_80_tensorop_s1688gemm_64x64_tn_align1"  # not "Kernel", for each
    assert bare_function("<forked function>") == "" and label_forms("<forked function>") == ["<forked function>"]
    w = fm.horizontalAdvance
    assert block_label(kernel, w("vectorized_elementwise_kernel"), fm) == "vectorized_elementwise_kernel"
    assert block_label(kernel, w("vectorized_ele…"), fm).startswith("vectorized_el")  # was "void at::n…"
