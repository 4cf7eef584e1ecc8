"""Colours of the views: one palette of RGB32 values, indexed by a small per-event colour key.

The timeline paints through numpy (`palette[key[event]]`), so colours are plain uint32 values
0xFFRRGGBB and an event's colour is decided once, at load time, by `event_color_keys`:

- CPU events inside a branch get the branch's colour; when the trace has branches, everything else
  is grey (so branches stand out); when it has none, events are coloured by a hash of their name.
  A branch's colour is its place *within its region* (`branch_slots`: by name, as
  `profiling.trace.ranges.branch_order` lists them), so the branches side by side in a region never
  share a colour, colours repeat only across regions, and a branch has the same colour in every run
  and mode of a model; a nested region's places start after those of the regions it sits in, so a
  nested branch never takes a colour of the branches around it. The palette is `BRANCH_HEX`, then
  the same colours lightened, then darkened (`BRANCH_SHADES`, 60): only a region of more than 60
  branches repeats a colour inside itself. Timeline and legend both take it from there.
- `step N` / `ProfilerStep#N` annotations are light grey.
- GPU events are coloured by kind (kernel, memcpy, memset, sync, annotation); kernels launched from
  a branch take the branch's colour.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from branchscope.profiling.trace.model import KIND_ORDER, Trace
from branchscope.profiling.trace.ranges import branch_order

BRANCH_HEX = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
    "#edc948", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#a0cbe8",
    "#ffbe7d", "#8cd17d", "#b6992d", "#499894", "#d4a6c8", "#d7b5a6", "#2f5d8a", "#a34a4a",
]  # fmt: skip
NEUTRAL_HEX = ["#7f8fa1", "#98a6b5", "#b0bbc7", "#c6ced8"]
STEP_HEX = "#d9dadd"
GPU_KINDS = ("kernel", "memcpy", "memset", "sync", "annotation", "other")
GPU_HEX = ["#2a9d8f", "#e9a23b", "#8e6bbf", "#c0392b", "#b8bcc4", "#7f8c8d"]


def _shade(h: str, toward: int, amount: float) -> str:
    rgb = int(h.lstrip("#"), 16)
    parts = [(rgb >> s) & 0xFF for s in (16, 8, 0)]
    mixed = [round(c + (((toward >> s) & 0xFF) - c) * amount) for c, s in zip(parts, (16, 8, 0), strict=True)]
    return "#" + "".join(f"{c:02x}" for c in mixed)


#: The branch colours: `BRANCH_HEX`, then those lightened, then darkened (a region of more than 20
#: branches takes the shades before any colour repeats within it).
BRANCH_SHADES = (
    BRANCH_HEX
    + [_shade(h, 0xFFFFFF, 0.5) for h in BRANCH_HEX]
    + [_shade(h, 0x000000, 0.4) for h in BRANCH_HEX]
)
HASH_HEX = [
    "#6a8fb3", "#c98b5b", "#6fa86a", "#c46f6f", "#9a82b5", "#5fa3a0", "#c2a84f", "#c98aa0",
    "#8d7a66", "#7fa7c9", "#a3a05a", "#b57fb0", "#6c9c85", "#b59474", "#8592c4", "#a8746e",
]  # fmt: skip
HIGHLIGHT_HEX = "#ffcc00"

BRANCH_BASE = 0
NEUTRAL_BASE = BRANCH_BASE + len(BRANCH_SHADES)
STEP_KEY = NEUTRAL_BASE + len(NEUTRAL_HEX)
GPU_BASE = STEP_KEY + 1
HASH_BASE = GPU_BASE + len(GPU_HEX)
HIGHLIGHT_KEY = HASH_BASE + len(HASH_HEX)

BACKGROUND = 0xFFFFFFFF
LANE_BG = (0xFFFFFFFF, 0xFFF4F6F8)
SEPARATOR = 0xFFD5DAE0

_STEP_NAME = re.compile(r"^(step \d+|ProfilerStep#\d+)$")


def hex_to_rgb32(h: str) -> int:
    return 0xFF000000 | int(h.lstrip("#"), 16)


def _palette() -> np.ndarray:
    hexes = BRANCH_SHADES + NEUTRAL_HEX + [STEP_HEX] + GPU_HEX + HASH_HEX + [HIGHLIGHT_HEX]
    return np.array([hex_to_rgb32(h) for h in hexes], dtype=np.uint32)


#: key -> 0xFFRRGGBB
PALETTE = _palette()


def luminance(c: np.ndarray) -> np.ndarray:
    r = ((c >> 16) & 0xFF).astype(np.float64)
    g = ((c >> 8) & 0xFF).astype(np.float64)
    b = (c & 0xFF).astype(np.float64)
    return (0.299 * r + 0.587 * g + 0.114 * b) / 255.0


#: key -> True where labels on that colour should be dark
DARK_TEXT = luminance(PALETTE) > 0.55


def blend(colors: np.ndarray, toward: int, amount: float) -> np.ndarray:
    """Mix RGB32 colours toward another colour (amount 0: unchanged, 1: `toward`)."""
    out = np.full(colors.shape, 0xFF000000, dtype=np.uint32)
    for shift in (16, 8, 0):
        a = ((colors >> shift) & 0xFF).astype(np.float64)
        b = (toward >> shift) & 0xFF
        out |= (np.rint(a + (b - a) * amount).astype(np.uint32) & 0xFF) << shift
    return out


#: The palette faded toward white: what is not a find match while a search is shown.
DIMMED_PALETTE = blend(PALETTE, BACKGROUND, 0.72)


def branch_slots(trace: Trace, names: Sequence[str]) -> np.ndarray:
    """The colour slot of each of `names` (branch names of `trace`): its place among its region's
    branches in the model's branch list (`branch_order`: by name within a region), never the order
    its events appear in; a nested region's places start after those of the regions around it
    ("1.2" after region 1's). Branches the run info does not list (and every branch of a trace
    without run info) are one group by name. Pass a slot to `branch_color`."""
    info = trace.run_info
    region_of = {b.name: b.region for b in info.branches} if info is not None else {}
    members: dict[str | None, list[str]] = {}
    for name in branch_order(trace, names):
        members.setdefault(region_of.get(name), []).append(name)

    def offset(region: str | None) -> int:
        """How many places the regions around `region` take (`1.2.1` sits in `1.2`, in `1`)."""
        if region is None:
            return 0
        parts = region.split(".")
        return sum(len(members.get(".".join(parts[:k]), ())) for k in range(1, len(parts)))

    place = {name: offset(region) + k for region, group in members.items() for k, name in enumerate(group)}
    return np.array([place[n] for n in names], dtype=np.int64)


def branch_color(slot: int) -> str:
    """The colour (#rrggbb) of a branch's slot (`branch_slots`); past len(BRANCH_SHADES) they repeat."""
    return BRANCH_SHADES[slot % len(BRANCH_SHADES)]


def gpu_kind_of_category(cat: str) -> int:
    c = cat.lower()
    if c in ("kernel", "gpu_op"):
        return 0
    if "memcpy" in c:
        return 1
    if "memset" in c:
        return 2
    if "sync" in c:
        return 3
    if "annotation" in c:
        return 4
    return 5


def event_color_keys(
    trace: Trace, event_branch: np.ndarray | None, slots: Sequence[int] | np.ndarray
) -> np.ndarray:
    """One palette key per event (uint8), as described in the module docstring: `event_branch[i]`
    indexes the branches whose colour slots (`branch_slots`) are `slots`, -1 for none."""
    slot_of = np.asarray(slots, dtype=np.int64)
    n_branches = slot_of.size
    n = len(trace)
    if n == 0:
        return np.zeros(0, dtype=np.uint8)
    is_step_name = np.fromiter(
        (bool(_STEP_NAME.match(s)) for s in trace.names), dtype=bool, count=len(trace.names)
    )
    if n_branches > 0:
        keys = (NEUTRAL_BASE + np.minimum(trace.depth, len(NEUTRAL_HEX) - 1)).astype(np.uint8)
    else:
        name_hash = np.fromiter(
            (zlib.crc32(s.encode("utf-8", "replace")) % len(HASH_HEX) for s in trace.names),
            dtype=np.int64,
            count=len(trace.names),
        )
        keys = (HASH_BASE + name_hash[trace.name_id]).astype(np.uint8)
    branch = None
    if event_branch is not None and n_branches > 0 and event_branch.size == n:
        branch = np.asarray(event_branch)
        in_branch = branch >= 0
        branch_key = (BRANCH_BASE + slot_of % len(BRANCH_SHADES)).astype(np.uint8)
        keys[in_branch] = branch_key[branch[in_branch]]
    keys[is_step_name[trace.name_id]] = STEP_KEY
    gpu_lane = trace.lane_kind_codes == KIND_ORDER.index("gpu")  # no Lane made per lane
    if gpu_lane.any():
        kind_of_cat = np.array([gpu_kind_of_category(c) for c in trace.cats], dtype=np.int64)
        on_gpu = gpu_lane[trace.lane]
        kind = kind_of_cat[trace.cat_id]
        gpu_keys = (GPU_BASE + kind).astype(np.uint8)
        if branch is not None:
            kernel_in_branch = (kind == 0) & (branch >= 0)
            gpu_keys[kernel_in_branch] = branch_key[branch[kernel_in_branch]]
        keys[on_gpu] = gpu_keys[on_gpu]
    return keys
