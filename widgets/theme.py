"""The views' neutral colours (backgrounds, gutters, text, axis lines), from the application palette.

The time panels draw their own backgrounds and text, so they cannot rely on the Qt style to follow a
dark palette: they ask `theme()` at paint (or build) time instead of using fixed colours. A light
palette gives the house colours (a blue-grey gutter, grey axis text); a dark one gives the same roles
blended from the palette's own base and text colours. Series colours (branches, devices, the pool)
are not neutral and stay as they are: they read on both.

`dark_palette()` is what View → Dark palette (and a projector in a dim room) switches to;
`presentation_font()` what View → Presentation size does (text a class can read from the back).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication

#: The least text height of the presentation size, in pixels (what reads from the back of a class).
PRESENTATION_TEXT_PX = 16


def presentation_font(font: QFont, dots_per_inch: float) -> QFont:
    """`font`, at least PRESENTATION_TEXT_PX pixels high on a screen of `dots_per_inch` (logical);
    sized in points when `font` is, as the views that derive their fonts from it expect."""
    big = QFont(font)
    if font.pointSizeF() > 0:
        big.setPointSizeF(max(font.pointSizeF(), PRESENTATION_TEXT_PX * 72 / max(dots_per_inch, 1.0)))
    else:
        big.setPixelSize(max(font.pixelSize(), PRESENTATION_TEXT_PX))
    return big


@dataclass(frozen=True)
class Theme:
    """The neutral colours of one palette."""

    dark: bool
    background: QColor  # plots
    gutter: QColor  # the label column left of the plots, the strip right of them
    text: QColor  # labels, titles
    muted: QColor  # tick labels, explanations
    axis_line: QColor  # axis and grid lines

    def css(self, color: QColor) -> str:
        """A colour for rich text (`style='color:…'`)."""
        return color.name()


LIGHT = Theme(
    dark=False,
    background=QColor("#ffffff"),
    gutter=QColor("#eef1f4"),
    text=QColor("#1f2933"),
    muted=QColor("#5b6570"),
    axis_line=QColor("#c9ced4"),
)


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    """`a` moved a share `t` of the way to `b`."""
    return QColor(
        round(a.red() + (b.red() - a.red()) * t),
        round(a.green() + (b.green() - a.green()) * t),
        round(a.blue() + (b.blue() - a.blue()) * t),
    )


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def theme(palette: QPalette | None = None) -> Theme:
    """The colours for `palette` (default: the application's)."""
    if palette is None:
        palette = QApplication.palette()
    if not is_dark(palette):
        return LIGHT
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    return Theme(
        dark=True,
        background=base,
        gutter=_mix(base, text, 0.08),
        text=text,
        muted=_mix(text, base, 0.35),
        axis_line=_mix(base, text, 0.25),
    )


def dark_palette() -> QPalette:
    """A dark palette for the whole application (Fusion's roles, dark blue-grey)."""
    p = QPalette()
    window, base, text = QColor("#23272e"), QColor("#1b1e23"), QColor("#e6e9ed")
    roles = {
        QPalette.ColorRole.Window: window,
        QPalette.ColorRole.WindowText: text,
        QPalette.ColorRole.Base: base,
        QPalette.ColorRole.AlternateBase: QColor("#262a31"),
        QPalette.ColorRole.ToolTipBase: QColor("#2d323a"),
        QPalette.ColorRole.ToolTipText: text,
        QPalette.ColorRole.PlaceholderText: QColor("#8a929c"),
        QPalette.ColorRole.Text: text,
        QPalette.ColorRole.Button: window,
        QPalette.ColorRole.ButtonText: text,
        QPalette.ColorRole.BrightText: QColor("#ff6b6b"),
        QPalette.ColorRole.Highlight: QColor("#3d7bd9"),
        QPalette.ColorRole.HighlightedText: QColor("#ffffff"),
        QPalette.ColorRole.Link: QColor("#6aa8ff"),
    }
    for role, color in roles.items():
        p.setColor(role, color)
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b7380"))
    return p
