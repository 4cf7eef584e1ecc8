"""The legend and the details panel with many branches: names that tell branches apart, region rows
with their counts that fold, the filter over modules and regions, the details panel's capped list."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem

from branchscope.widgets.branch_legend import BranchLegend, LegendRow, legend_rows, shown_names
from branchscope.widgets.details_panel import DetailsPanel
from tests.builders.branches import many_branch_trace
from tests.gui_helpers import show

CHAINS = ["branch1x1", "branch5x5_1 → branch5x5_2", "branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3", "branch_pool",
          "branch7x7_1 → branch7x7_2", "branch3x3_1 → branch3x3_2"]  # fmt: skip
SIZES = [4, 5, 6, 4, 5, 6, 4, 5, 6, 5]  # 50 branches, as inception_v3 has


def _inception_like():
    """10 blocks as a fork run names them: `blocks.3.branch1x1`, `blocks.3: branch5x5_1 → branch5x5_2`."""
    regions = {}
    for r, n in enumerate(SIZES):
        names = [f"blocks.{r}." + c if "→" not in c else f"blocks.{r}: " + c for c in CHAINS[:n]]
        regions[str(r + 1)] = (f"blocks.{r}", names)
    return many_branch_trace(regions)


ATTN = "text_model.encoder.layers.{}.self_attn.out_proj"


def _clip_like():
    """CLIP's text layers side by side: one long prefix, one long ending, the layer's number between."""
    return many_branch_trace({"1": ("after text_model.embeddings", [ATTN.format(k) for k in range(3, 12)])})


def _drawn(tree: QTreeWidget, item: QTreeWidgetItem) -> str:
    """What the row's name reads as once cut to its column (Qt's middle elision)."""
    room = tree.visualItemRect(item).width() - tree.iconSize().width() - 8
    return tree.fontMetrics().elidedText(item.text(0), Qt.TextElideMode.ElideMiddle, room)


def test_names_sharing_a_long_prefix_show_what_differs_and_the_whole_name_on_hover(qtbot):
    legend = show(qtbot, BranchLegend(), 260, 400)
    legend.set_trace(_clip_like())
    tree = legend.tree
    names = [ATTN.format(k) for k in range(3, 12)]
    items = [legend.item_of(n) for n in names]
    # each whole, in lines where the column is too narrow for it
    assert [i.text(0).replace("\n", "") for i in items] == [f"…layers.{k}.self_attn.out_proj" for k in range(3, 12)]
    drawn = [_drawn(tree, i) for i in items]
    assert len(set(drawn)) == len(names), drawn
    # the names in full would read alike once cut: "text_model.en…out_proj"
    room = tree.visualItemRect(items[0]).width() - tree.iconSize().width() - 8
    cut = {tree.fontMetrics().elidedText(n, Qt.TextElideMode.ElideMiddle, room) for n in names}
    assert len(cut) < len(names)
    assert all(i.toolTip(0).splitlines()[0].startswith(n + ": ") for i, n in zip(items, names, strict=True))
    # the column widens with the panel, up to the names in full
    narrow = tree.columnWidth(0)
    legend.resize(600, 400)
    qtbot.waitUntil(lambda: tree.columnWidth(0) > narrow + 200)


def test_a_region_leaves_its_own_name_out_of_its_branches_and_reads_them_apart():
    rows = legend_rows(_inception_like())
    shown = shown_names(rows)
    assert shown["blocks.3.branch1x1"] == "branch1x1"
    assert shown["blocks.3: branch5x5_1 → branch5x5_2"] == "branch5x5_1 → branch5x5_2"
    for r in range(10):
        texts = [shown[row.name] for row in rows if row.region == str(r + 1)]
        assert len(set(texts)) == len(texts) == SIZES[r]
    # where leaving a prefix out would make two rows alike, or a name empty, the names stay whole
    alike = [
        LegendRow("m.a.x", "#000000", 0, 0, None, "1", "m.a"),
        LegendRow("m.a: x", "#000000", 0, 0, None, "1", "m.a"),
    ]
    assert shown_names(alike) == {"m.a.x": "m.a.x", "m.a: x": "m.a: x"}
    bare = [
        LegendRow("head", "#000000", 0, 0, None, "1", "head"),
        LegendRow("head.x", "#000000", 0, 0, None, "1", "head"),
    ]
    assert shown_names(bare) == {"head": "head", "head.x": "x"}
    chain = [
        LegendRow(n, "#000000", 0, 0, None, "1", "m") for n in ("m → n", "m.b")
    ]  # a chain keeps its first step
    assert shown_names(chain) == {"m → n": "m → n", "m.b": "b"}
    short = [LegendRow(f"m.{k}", "#000000", 0, 0, None, "1", None) for k in range(2)]  # a short prefix stays
    assert shown_names(short) == {"m.0": "m.0", "m.1": "m.1"}


def test_fifty_branches_sit_under_counted_regions_in_the_models_order_and_the_filter_finds_modules(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 500)
    legend.set_trace(_inception_like())
    tree = legend.tree
    tops = [tree.topLevelItem(i).text(0) for i in range(tree.topLevelItemCount())]
    assert tops == [f"blocks.{r} · {n} branches" for r, n in enumerate(SIZES)]  # region 10 after 9
    # a module inside a chain, by its path; a region by its name or its id
    legend.filter.setText("blocks.7.branch3x3dbl_2")
    assert legend.shown_branches() == ["blocks.7: branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3"]
    legend.filter.setText("BRANCH7X7_2")
    assert len(legend.shown_branches()) == 7  # one in each region of 5 or 6
    legend.filter.setText("region 10")
    assert legend.shown_branches() == [r.name for r in legend.rows if r.region == "10"]


def test_regions_fold_stay_folded_in_the_next_run_and_open_for_a_match(qtbot):
    legend = show(qtbot, BranchLegend(), 320, 500)
    legend.set_trace(_inception_like())
    tree = legend.tree
    assert tree.rootIsDecorated() and legend.folded_regions() == []
    second = legend.region_item("2")
    rect = tree.visualItemRect(second)  # its arrow, left of its text
    qtbot.mouseClick(
        tree.viewport(),
        Qt.MouseButton.LeftButton,
        pos=QPoint(rect.left() - tree.indentation() // 2, rect.center().y()),
    )
    qtbot.waitUntil(lambda: legend.folded_regions() == ["2"])
    assert tree.visualItemRect(legend.item_of("blocks.1.branch1x1")).height() == 0  # out of sight
    legend.set_trace(_inception_like())  # another run of the model
    assert legend.folded_regions() == ["2"]
    legend.filter.setText("blocks.1.branch_pool")  # a match in the folded region opens it
    assert legend.folded_regions() == [] and legend.shown_branches() == ["blocks.1.branch_pool"]
    legend.filter.clear()
    assert legend.folded_regions() == ["2"]


def test_the_details_panel_lists_many_branches_one_per_line_then_says_how_many_more(qtbot):
    details = show(qtbot, DetailsPanel(), 320, 600)
    trace = _inception_like()
    details.set_trace(trace)
    assert ("Branches", "50 in 10 regions") in details.rows
    shown = DetailsPanel.BRANCHES_SHOWN
    assert details.branch_names() == [r.name for r in legend_rows(trace)][:shown]
    tree = details.branches
    last = tree.topLevelItem(tree.topLevelItemCount() - 1)
    assert last.text(0) == f"… and {50 - shown} more (the legend lists every branch)"
    # each branch on a line of its own, with its colour's swatch
    first, second = details.branches.topLevelItem(0).child(0), details.branches.topLevelItem(0).child(1)
    assert tree.visualItemRect(second).top() >= tree.visualItemRect(first).bottom()
    assert not first.icon(0).isNull()
    # a run of few branches: no such line
    details.set_trace(many_branch_trace({"1": ("pair", ["pair.a", "pair.b"])}))
    assert details.branch_names() == ["pair.a", "pair.b"]
    assert all("more" not in tree.topLevelItem(i).text(0) for i in range(tree.topLevelItemCount()))
