"""Issue 35, finding 12: a legend row's name wraps so that every character is drawn: at its spaces,
and a word wider than the row at its own joints (`_`, `.`, a letter before a digit)."""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontMetricsF

from branchscope.widgets.legend_names import wrapped


def _fm(qapp) -> QFontMetricsF:
    font = QFont(qapp.font())
    font.setPixelSize(16)
    return QFontMetricsF(font)


def test_a_word_too_wide_for_its_line_breaks_at_its_joints_and_keeps_every_character(qapp):
    fm = _fm(qapp)
    room = fm.horizontalAdvance("branch_p")  # "branch_pool" does not fit, "branch_" does
    assert wrapped("branch_pool", room, fm) == "branch_\npool"
    assert wrapped("branch1x1", fm.horizontalAdvance("branch1"), fm) == "branch\n1x1"  # before the digits
    assert wrapped("…layers.10.self_attn", fm.horizontalAdvance("…layers.10.s"), fm) == "…layers.10.\nself_attn"
    # no joint: cut where the line is full, never an empty line
    lines = wrapped("abcdefghij", fm.horizontalAdvance("abcd"), fm).split("\n")
    assert "".join(lines) == "abcdefghij" and all(lines)
    assert all(fm.horizontalAdvance(line) <= fm.horizontalAdvance("abcd") for line in lines)


def test_words_wrap_at_spaces_and_a_texts_own_line_breaks_stay(qapp):
    fm = _fm(qapp)
    chain = "3x3dbl_1 → 3x3dbl_2 → 3x3dbl_3"
    assert wrapped(chain, fm.horizontalAdvance("3x3dbl_1 →"), fm) == "3x3dbl_1 →\n3x3dbl_2 →\n3x3dbl_3"
    assert wrapped(chain, fm.horizontalAdvance(chain), fm) == chain
    assert wrapped("x · 4 branches\n≤ 1.95× on 2 threads", fm.horizontalAdvance("x · 4 branches"), fm) == (
        "x · 4 branches\n≤ 1.95× on 2\nthreads"
    )
