"""Branch colours: distinct within a region, repeated only across regions, fixed by the names."""

from __future__ import annotations

import random

from branchscope.profiling.trace.ranges import branch_order
from branchscope.widgets import colors
from tests.builders.branches import many_branch_trace

BLOCK = [
    "branch1x1",
    "branch5x5_1 → branch5x5_2",
    "branch3x3dbl_1 → branch3x3dbl_2 → branch3x3dbl_3",
    "branch_pool",
]


def _regions(sizes: list[int]) -> dict[str, tuple[str | None, list[str]]]:
    return {
        str(r + 1): (
            f"blocks.{r}",
            [f"blocks.{r}: {BLOCK[k % 4]}" + (f" #{k // 4 + 1}" if k >= 4 else "") for k in range(n)],
        )
        for r, n in enumerate(sizes)
    }


def _colours(trace) -> dict[str, str]:
    names = branch_order(trace)
    return {
        n: colors.branch_color(int(s))
        for n, s in zip(names, colors.branch_slots(trace, names).tolist(), strict=True)
    }


def test_branches_of_a_region_never_share_a_colour_and_regions_reuse_the_palette():
    regions = _regions([4, 5, 6, 4, 5, 6, 4, 5, 6, 5])  # 50 branches in 10 regions
    trace = many_branch_trace(regions)
    colour = _colours(trace)
    assert len(colour) == 50
    for _, names in regions.values():
        assert len({colour[n] for n in names}) == len(names)
    # the palette starts again in each region, so region 10 looks like region 1 where it can
    assert {colour[n] for n in regions["10"][1]} <= {colour[n] for n in regions["3"][1]}
    assert all(c in colors.BRANCH_HEX for c in colour.values())


def test_a_region_of_25_branches_has_25_distinct_colours():
    regions = {"1": ("wide", [f"wide.b{k:02d}" for k in range(25)]), "2": ("next", ["next.a", "next.b"])}
    colour = _colours(many_branch_trace(regions))
    assert len({colour[n] for n in regions["1"][1]}) == 25
    palette = {colors.hex_to_rgb32(c) for c in colour.values()}
    assert palette <= {int(v) for v in colors.PALETTE[colors.BRANCH_BASE : colors.NEUTRAL_BASE]}


def test_the_same_names_get_the_same_colours_whatever_order_their_events_come_in():
    regions = _regions([4, 6, 5])
    listed = [n for _, names in regions.values() for n in names]
    shuffled = listed[:]
    random.Random(7).shuffle(shuffled)
    assert _colours(many_branch_trace(regions)) == _colours(many_branch_trace(regions, shuffled))


def test_a_nested_region_takes_colours_apart_from_the_region_around_it():
    regions = {
        "1": ("outer", ["outer.a", "outer.b"]),
        "1.1": (None, ["outer.a.x", "outer.a.y"]),
        "2": ("head", ["head.c"]),
    }
    colour = _colours(many_branch_trace(regions))
    assert len({colour[n] for n in ["outer.a", "outer.b", "outer.a.x", "outer.a.y"]}) == 4
    assert colour["head.c"] == colour["outer.a"]  # another region: the palette again
