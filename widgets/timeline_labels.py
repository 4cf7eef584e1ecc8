"""The timeline's text: what an event's block and a lane's label say in the room they have.

A block shows the longest form of its name that fits (`label_forms`, `block_label`: a branch's
chain shortened to its first module, then to what tells it from its siblings (`sibling_prefix`:
`3x3dbl_1`, not `b…1`), an op or a kernel without its namespaces, templates and arguments
(`bare_function`); cut in the middle keeping the end, where sibling names differ,
`elide_keeping_end`); a lane label or group title keeps what tells it apart (`gutter_text`).
`TimelinePainter` draws them; these only measure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

from branchscope.profiling.trace.run_info import BRANCH_PREFIX, branch_name

#: A branch chain's links as the trace writes them (`run_info.branch_label`) and as labels say them.
_LINK, _MORE = " → ", "…"


def label_forms(name: str, shared: str = "") -> list[str]:
    """The texts a block named `name` may be labelled with, longest first: the name (a branch's
    links written "→", as the legend writes them); for a branch (`branch: a -> b -> c`) then
    without the common prefix (`a → b → c`), the chain's first modules (`a → b → …`, `a → …`) and
    its first module alone (`a`), which is what tells sibling branches apart (each begins with a
    module of its own), and last that module without the word its siblings share (`shared`,
    `sibling_prefix`: `branch3x3dbl_1` → `3x3dbl_1`); for an op or a kernel
    (`aten::convolution`) then its `bare_function` name (`convolution`)."""
    if not name.startswith(BRANCH_PREFIX):
        # an op without its namespaces ("aten::convolution" → "convolution"): "aten::…" tells none apart
        bare = bare_function(name)
        return [name, bare] if bare and bare != name else [name]
    parts = [part for part in (branch_name(name) or "").split(_LINK) if part]  # its name, unescaped
    if not parts:
        return [name]
    forms = [BRANCH_PREFIX + _LINK.join(parts), _LINK.join(parts)]
    forms += [_LINK.join([*parts[:k], _MORE]) for k in range(len(parts) - 1, 0, -1)]
    if len(parts) > 1:
        forms.append(parts[0])
    own = without_shared_word(parts[0], shared)
    if own:
        forms.append(own)
    return forms


#: Names that say nothing alone: a template's first argument says it instead.
_GENERIC = {"kernel", "device_kernel", "kernel_impl"}


def bare_function(name: str) -> str:
    """An op's or a kernel's name as a block can say it: without a return type, namespaces,
    template and argument lists (`void at::native::vectorized_elementwise_kernel<4, …>(int, …)` →
    `vectorized_elementwise_kernel`, `aten::convolution` → `convolution`, `Memcpy HtoD (Pageable
    -> Device)` → `Memcpy HtoD`; a generic `cutlass::Kernel<cutlass_80_…>` is its first template
    argument); "" when nothing is left. Namespaces stay where a space comes
    before them (`a b::c`: not a qualified name)."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth, kept, template = 0, [], []  # template: the last template list's text at its own depth
    for ch in text:
        if ch == "<":
            if depth == 0:
                template = []
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            if ch == "(":  # the argument list
                break
            kept.append(ch)
        elif depth == 1:
            template.append(ch)
    qualified = "".join(kept).strip()
    space, sep, last = qualified.rpartition("::")
    bare = last.strip() if sep and last.strip() and " " not in space else qualified
    arg = "".join(template).split(",")[0].strip()
    # a generic name (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_…>`): its first argument says which
    return arg if bare.lower() in _GENERIC and arg.isidentifier() else bare


#: What may separate the word sibling branches share from what tells them apart.
_SEPARATORS = "_.:- "


def without_shared_word(module: str, shared: str) -> str:
    """`module` without its leading `shared` word and the separators after it; "" when it does not
    begin with it or nothing would be left."""
    if not shared or not module.startswith(shared):
        return ""
    return module[len(shared) :].lstrip(_SEPARATORS)


def sibling_prefix(names: Iterable[str]) -> str:
    """The word the first modules of a trace's branches all begin with ("branch" for Inception's
    `branch1x1`, `branch5x5_1`, `branch3x3dbl_1`, `branch_pool`), which a label may drop when the
    whole module does not fit; "" with fewer than two branches or no such word. Only letters count
    (`branch3x3_1` and `branch3x3dbl_1` share "branch", not "branch3x3": "1" would say nothing)."""
    firsts = set()
    for name in names:
        if name.startswith(BRANCH_PREFIX):
            parts = (branch_name(name) or "").split(_LINK)
            if parts[0]:
                firsts.add(parts[0])
    if len(firsts) < 2:
        return ""
    word = re.match(r"[^\W\d_]*", os.path.commonprefix(sorted(firsts)))
    return word.group(0) if word else ""


#: A cut label keeps at least this many characters, or shows nothing: "…1" or "s…" tells no block
#: from its neighbours, it only adds noise.
FEWEST_SHOWN = 3


def elide_keeping_end(text: str, room: int, fm: QFontMetrics) -> str:
    """`text` cut in the middle to fit `room` pixels, keeping about twice as much of its end as of
    its start (`branch3x3dbl_1` → `bra…dbl_1`: names of siblings differ at their end); "" when
    fewer than `FEWEST_SHOWN` characters and the ellipsis fit."""
    if fm.horizontalAdvance(text) <= room:
        return text

    def cut(k: int) -> str:  # k characters kept
        head = (k + 1) // 3
        return text[:head] + _MORE + text[len(text) - (k - head) :]

    lo, hi = 0, len(text) - 1  # the most characters kept that fit: cut(lo) fits, or lo is 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fm.horizontalAdvance(cut(mid)) <= room:
            lo = mid
        else:
            hi = mid - 1
    return cut(lo) if lo >= min(FEWEST_SHOWN, len(text) - 1) else ""


def block_label(name: str, room: int, fm: QFontMetrics, shared: str = "") -> str:
    """What a block named `name` shows in `room` pixels: the longest of `label_forms` that fits; else
    a branch's shortest form (its own part of its first module) cut in the middle
    (`elide_keeping_end`), any other name's shortest form cut at its right; "" when nothing
    readable fits. `shared` is the word sibling branches share (`sibling_prefix`)."""
    forms = label_forms(name, shared)
    for form in forms:
        if fm.horizontalAdvance(form) <= room:
            return form
    if not name.startswith(BRANCH_PREFIX) or len(forms) == 1:
        text = fm.elidedText(forms[-1], Qt.TextElideMode.ElideRight, room)
        return "" if text.endswith(_MORE) and len(text) - 1 < FEWEST_SHOWN else text
    return elide_keeping_end(forms[-1], room, fm)


_THREAD_LABEL = re.compile(r"^(.+?) \((.+)\)$")
#: The fewest of a name's characters a label keeps (all of a shorter name): a group title keeps its
#: count only while its name keeps this many; a legend row never shows fewer (`legend_names`).
KEPT_CHARACTERS = 12


def gutter_text(label: str, fm: QFontMetrics, width: int) -> str:
    """A lane label or group title cut to `width` pixels keeping what tells it apart: a thread's
    id whole before its name ("thread 23456 (pyth…)", not "thread 23…ython3.8)"), a group's count
    ("inter-op p… · 2 threads"); otherwise cut in the middle. The whole label is the gutter's
    tooltip (`TimelineView.on_hover`)."""
    if fm.horizontalAdvance(label) <= width:
        return label
    head, sep, tail = label.rpartition(" · ")
    if sep:
        room = width - fm.horizontalAdvance(sep + tail)
        cut = fm.elidedText(head, Qt.TextElideMode.ElideRight, room) if room > 0 else ""
        if len(cut) > min(len(head), KEPT_CHARACTERS):  # the count beside a readable name
            return cut + sep + tail
        if fm.horizontalAdvance(head) <= width:
            return head  # the name before its count ("Python pool", not "Pytho… · 2 threads")
    m = _THREAD_LABEL.match(label)
    if m:
        head = m.group(1)
        room = width - fm.horizontalAdvance(head + " ()")
        cut = fm.elidedText(m.group(2), Qt.TextElideMode.ElideRight, room) if room > 0 else ""
        if len(cut) > 1:
            return f"{head} ({cut})"
        if fm.horizontalAdvance(head) <= width:
            return head
    return fm.elidedText(label, Qt.TextElideMode.ElideMiddle, width)
