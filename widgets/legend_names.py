"""What a branch's row says in the room it has (the legend and the details panel's branch tree).

A row shows what tells its branch from those beside it (`shown_names`: the region's name, a long
prefix they share, left out); a name too long for its column drops the word its siblings share
(`compact_name`: "3x3dbl_1", as the timeline's blocks do) where that keeps `timeline_labels.KEPT_CHARACTERS`, and
wraps (`wrapped`: at its spaces, a word wider than the column at its own joints, "branch_" /
"pool"), so every character of it is drawn. These only measure; `branch_legend` sets the rows.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtGui import QFontMetricsF

from branchscope.widgets.timeline_labels import without_shared_word

#: A prefix its siblings share is left out of a name (shown as "…") from this many characters on.
SHARED_PREFIX = 12
#: Separators a shared prefix is cut at: a module path's dot, a chain's module (`blocks.0: a → b`).
_CUTS = (": ", " → ", ".")
#: A word too wide for its line breaks after one of these (`branch_` / `pool`), else before a digit
#: after a letter (`branch` / `1x1`), else where its line ends.
_JOINTS = "_.-:"


class NamedRow(Protocol):
    """What `shown_names` reads of a row (`branch_legend.LegendRow`)."""

    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> str | None: ...
    @property
    def region(self) -> str | None: ...
    @property
    def region_name(self) -> str | None: ...


def compact_name(shown: str, shared: str) -> str:
    """A row's name without the word its sibling branches share (`shared`, as the timeline's blocks
    drop it: `timeline_labels.sibling_prefix`) at the start of each module of its chain
    ("branch3x3dbl_1 → branch3x3dbl_2" → "3x3dbl_1 → 3x3dbl_2"): what a row too narrow for the
    name shows, so the characters that tell branches apart are the ones kept."""
    return " → ".join(without_shared_word(part, shared) or part for part in shown.split(" → "))


def wrapped(text: str, room: int, fm: QFontMetricsF) -> str:
    """`text` broken into lines at its spaces (a chain after its "→"), each as long as fits `room`
    pixels (`fm` measures in fractions of a pixel, as Qt's text layout does), a word wider than that broken at its joints (`word_pieces`); its own line breaks stay.
    The legend's rows are as tall as their lines (Qt's tree views size a row for its text's lines,
    never for its word wrap)."""
    return "\n".join(_wrapped_line(line, room, fm) for line in text.split("\n"))


def _wrapped_line(text: str, room: int, fm: QFontMetricsF) -> str:
    lines: list[str] = []
    for word in text.split(" "):
        pieces = word_pieces(word, room, fm)
        if lines and fm.horizontalAdvance(f"{lines[-1]} {pieces[0]}") <= room:
            lines[-1] += f" {pieces.pop(0)}"
        lines.extend(pieces)
    return "\n".join(lines)


def word_pieces(word: str, room: int, fm: QFontMetricsF) -> list[str]:
    """`word` in pieces each as wide as fits `room` pixels (at least one character), each cut after
    its last `_JOINTS` character or before a digit after a letter where it has one: all of a
    one-word name stays in sight ("branch_pool" → "branch_", "pool")."""
    pieces: list[str] = []
    while len(word) > 1 and fm.horizontalAdvance(word) > room:
        fits = 1  # the most characters that fit (at least one)
        while fits < len(word) - 1 and fm.horizontalAdvance(word[: fits + 1]) <= room:
            fits += 1
        joints = [k for k in range(1, fits + 1) if _is_joint(word, k)]
        cut = joints[-1] if joints else fits
        pieces.append(word[:cut])
        word = word[cut:]
    return [*pieces, word]


def _is_joint(word: str, k: int) -> bool:
    """Whether `word` may break before its character `k`."""
    return word[k - 1] in _JOINTS or (word[k - 1].isalpha() and word[k].isdigit())


def _after_cut(name: str, length: int) -> int:
    """Where the component holding `name[length - 1]` starts: just after the last separator
    before `length` (0: none)."""
    return max((name.rfind(cut, 0, length) + len(cut) for cut in _CUTS if name.rfind(cut, 0, length) >= 0), default=0)


def shown_names(rows: list[NamedRow]) -> dict[str, str]:
    """Each branch's name as its row shows it: what tells it from the branches beside it.

    A name that starts with its region's name (`blocks.0: branch5x5_1 → branch5x5_2` under
    `blocks.0`) leaves that out, since the region's row says it; else a prefix all its siblings
    share, of `SHARED_PREFIX` characters or more, becomes "…" but for its last component
    (`…layers.3.mlp`, `…layers.4.mlp`). Where that would make two rows read alike, or a name
    empty, the group keeps its names in full; the tooltip always holds the whole name.
    """
    groups: dict[tuple[str | None, str | None], list[NamedRow]] = {}
    for row in rows:
        groups.setdefault((row.parent, row.region), []).append(row)
    out: dict[str, str] = {}
    for members in groups.values():
        shown: dict[str, str] = {}
        for row in members:
            text = row.name
            for cut in (": ", "."):  # the region's module (never a chain's first step: `x → y`)
                if row.region_name and text.startswith(row.region_name + cut):
                    text = text[len(row.region_name) + len(cut) :]
                    break
            shown[row.name] = text
        if len(members) > 1 and all(shown[r.name] == r.name for r in members):
            names = [r.name for r in members]
            common = len(_common_prefix(names))
            start = min(_after_cut(n, common + 1) for n in names)  # the start of the first component that differs
            keep = min(_after_cut(n, max(start - 1, 0)) for n in names)  # ... and of the shared one before it
            if start >= SHARED_PREFIX and keep > 0:
                shown = {n: "…" + n[keep:] for n in names}
        texts = list(shown.values())
        if len(set(texts)) < len(texts) or not all(t.strip(" .…:→") for t in texts):
            shown = {r.name: r.name for r in members}
        out.update(shown)
    return out


def _common_prefix(names: list[str]) -> str:
    first, last = min(names), max(names)
    k = 0
    while k < min(len(first), len(last)) and first[k] == last[k]:
        k += 1
    return first[:k]
