"""The Memory tab for a job of many ranks (pytest-qt, offscreen): its devices in rank order
(rank2 before rank10, never as strings), its bars' names never overlapping at a projector's
1280×720 nor at 1920×1080 (every k-th bar named, every name in its tooltip), the details
panel's memory rows in the same order."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QApplication

from branchscope.profiling.trace.memory import analyze_memory
from branchscope.profiling.trace.model import MemorySeries, Trace, build_trace
from branchscope.profiling.trace.natural import natural_key
from branchscope.widgets.details_panel import trace_summary_rows
from branchscope.widgets.memory_summary import MemorySummary
from tests.builders.memory import MiB
from tests.gui_helpers import show

#: A job's devices as a shell or a string sort lists them: rank0, rank1, rank10, rank11, …, rank2.
RANKS = sorted(range(32), key=str)


def ranks_trace(ranks: list[int] = RANKS) -> Trace:
    """A merged trace of one GPU per rank, its memory listed in `ranks`' order: each rank allocates
    (rank + 1) MiB and frees it; rank 15 holds 3× the others' most."""
    series = [
        MemorySeries(
            f"rank{r}/cuda:0",
            np.array([10, 20], dtype=np.int64),
            np.array([b, -b], dtype=np.int64),
            np.array([b, 0], dtype=np.int64),
            addr=np.array([4096, 4096], dtype=np.int64),
            rank=r,
        )
        for r in ranks
        for b in [(96 if r == 15 else r + 1) * MiB]
    ]
    return build_trace(
        path="job", start_ns=np.zeros(0, dtype=np.int64), dur_ns=np.zeros(0, dtype=np.int64),
        lane=np.zeros(0), name_id=np.zeros(0), cat_id=np.zeros(0), names=[], cats=[], lanes=[], memory=series,
    )  # fmt: skip


def test_natural_key_sorts_numbers_by_value() -> None:
    names = ["rank10/cuda:0", "rank2/cuda:10", "rank2/cuda:2", "rank1/cpu", "Rank1/cuda:0"]
    assert sorted(names, key=natural_key) == [
        "rank1/cpu", "Rank1/cuda:0", "rank2/cuda:2", "rank2/cuda:10", "rank10/cuda:0",
    ]  # fmt: skip


def test_analysis_lists_devices_in_rank_order() -> None:
    analysis = analyze_memory(ranks_trace())
    assert [d.rank for d in analysis.devices] == list(range(32))
    assert analysis.to_json()["devices"][2]["rank"] == 2  # branchscope memory --json follows
    assert analysis.imbalance[0].heaviest == "rank15/cuda:0"


def test_details_panel_lists_memory_in_rank_order() -> None:
    rows = [title for title, _ in trace_summary_rows(ranks_trace()) if title.startswith("Memory ")]
    assert rows == [f"Memory rank{r}/cuda:0" for r in range(32)]


def _label_rects(view: MemorySummary) -> list[tuple[str, object]]:
    """The bars' axis labels as drawn: (text, rect in the axis's pixels), left to right."""
    axis = view.plots["cuda"].getAxis("bottom")
    image = QImage(1, 1, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    painter.setFont(axis.style["tickFont"] or axis.font())
    try:
        _, _, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return sorted(((text, rect) for rect, _, text in texts if text), key=lambda tr: tr[1].left())


# The Memory tab's summary at a projector's 1280×720 and at 1920×1080 (the page beside the window's side panel).
@pytest.mark.parametrize("size", [(860, 300), (1500, 420)])
def test_32_rank_names_never_overlap(qtbot, size: tuple[int, int]) -> None:
    view = show(qtbot, MemorySummary(), *size)
    view.set_analysis(analyze_memory(ranks_trace()))
    QApplication.processEvents()
    labels = _label_rects(view)
    assert len(labels) >= 4  # some names, in rank order from rank0
    texts = [t for t, _ in labels]
    assert texts[0] == "rank0/cuda:0"
    assert sorted(texts, key=natural_key) == texts
    for (a, ra), (b, rb) in zip(labels, labels[1:]):
        assert ra.right() < rb.left(), f"{a} overlaps {b}"
    # every bar, named or not, says its full name and peak in its tooltip, in rank order
    bars = view.bars["cuda"]
    assert bars.tips[10] == "rank10/cuda:0: peak 11 MiB"
    assert [t.split(":")[0] for t in bars.tips] == [f"rank{r}/cuda" for r in range(32)]
    assert view.plots["cuda"].getAxis("bottom").tips == bars.tips
