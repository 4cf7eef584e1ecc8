"""The window's three columns at any text size and window size: the left panel (the run controls over
the runs list), the pages, the side panels.

Widths are counted in the text's average character width, not in pixels: larger text (View → Larger
text, View → Presentation size) widens the left panel with it instead of squeezing the runs list,
and a projector's 1280×720 still leaves the pages room (the side panels give way first, and can be
dragged shut). In the left panel the runs list keeps RUNS_LINES lines of text whatever the window's
height; the run controls above it scroll when they do not fit, rather than making the window
taller than the screen. Sizes are fitted again when the text size or the window's size changes,
when the run controls grow or shrink (a longer note) and when the side panels show or hide, until the user drags a handle (from then on
the sizes are theirs, until the text size changes).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QFrame, QScrollArea, QSplitter, QStyle, QWidget

#: The widths the columns like, in average characters of the text (so they grow with it), each at
#: most a share of the window: the left panel (the run controls and the runs list), the side panels.
LEFT_CHARS, LEFT_SHARE = 68, 0.4
SIDE_CHARS, SIDE_SHARE = 48, 0.25
#: The left panel is never wider than this many characters.
LEFT_MOST_CHARS = 90
#: The pages keep at least this many characters: the side panels give way first, then the left panel.
CENTRE_CHARS = 70
#: The runs list (with its title and Compare button) keeps at least this many lines of text.
RUNS_LINES = 11


def column_widths(width: int, char_w: float, least: tuple[int, int, int] = (0, 0, 0)) -> list[int]:
    """The left panel's, the pages' and the side panels' widths for a splitter `width` pixels wide
    whose text is `char_w` pixels a character, `least` the widths each needs (their widgets' minimum
    sizes). Each column its liked width within its share; when the pages would get less than they
    need (and CENTRE_CHARS), the side panels give way down to what they need, then the left panel,
    then the side panels shut."""
    sizes = [
        max(least[0], round(min(LEFT_CHARS * char_w, LEFT_SHARE * width))),
        0,
        max(least[2], round(min(SIDE_CHARS * char_w, SIDE_SHARE * width))),
    ]
    short = max(round(CENTRE_CHARS * char_w), least[1]) - (width - sizes[0] - sizes[2])
    for k in (2, 0):
        give = min(max(short, 0), sizes[k] - least[k])
        sizes[k] -= give
        short -= give
    if short > 0:
        sizes[2] = 0
    sizes[1] = width - sizes[0] - sizes[2]
    return sizes


def left_heights(height: int, controls_wanted: int, runs_least: int) -> list[int]:
    """The run controls' and the runs list's heights in a left panel `height` pixels high: the
    controls as high as they want, the runs list the rest but never under `runs_least`."""
    runs = max(runs_least, height - controls_wanted)
    return [max(0, height - runs), runs]


class WindowLayout(QObject):
    """The columns of `window` (`splitter`, its central widget): `controls` scrolling over `runs`
    on the left, `centre`, `side`; kept fitted to the window's text and size (see the module docstring)."""

    def __init__(self, window: QWidget, controls: QWidget, runs: QWidget, centre: QWidget, side: QWidget):
        super().__init__(window)
        self.window = window
        self.controls = controls
        #: The run controls, scrolling when the window is too short or narrow for them.
        self.controls_area = QScrollArea()
        self.controls_area.setWidget(controls)
        self.controls_area.setWidgetResizable(True)
        self.controls_area.setFrameShape(QFrame.Shape.NoFrame)
        self.controls_area.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the controls in it take the focus, not it
        #: The left panel: the controls over the runs list.
        self.left = QSplitter(Qt.Orientation.Vertical)
        self.left.setContentsMargins(8, 8, 4, 8)
        self.left.addWidget(self.controls_area)
        self.left.addWidget(runs)
        self.left.setCollapsible(0, False)
        self.left.setCollapsible(1, False)
        self.left.setStretchFactor(1, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        for k, part in enumerate([self.left, centre, side]):
            self.splitter.addWidget(part)
            self.splitter.setStretchFactor(k, int(part is centre))
        self.splitter.setCollapsible(0, False)
        self.splitter.setCollapsible(1, False)
        self.splitter.setCollapsible(2, True)  # the side panels can be dragged shut
        #: Whether the user dragged a handle: then resizing the window keeps their sizes.
        self.user_sized = False
        self.splitter.splitterMoved.connect(self._moved)
        self.left.splitterMoved.connect(self._moved)
        #: Fits asked for by events, done once the window's geometry has settled.
        self._fit_timer = QTimer(self, singleShot=True, interval=0, timeout=self.fit)
        window.installEventFilter(self)
        controls.installEventFilter(self)  # their text grows and shrinks with what is shown
        side.installEventFilter(self)  # shown beside some pages only: the others take its room
        self.fit()

    def fit(self) -> None:
        """Fit the columns and the left panel to the window's size and text (the user's sizes are dropped)."""
        metrics = QFontMetricsF(self.window.font())
        char_w = metrics.averageCharWidth()
        scrollbar = self.window.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        margins = self.left.contentsMargins()
        controls_least = self.controls.minimumSizeHint().width() + scrollbar + margins.left() + margins.right()
        self.left.setMaximumWidth(max(round(LEFT_MOST_CHARS * char_w), controls_least))
        handles = (self.splitter.count() - 1) * self.splitter.handleWidth()
        least = (controls_least, self.splitter.widget(1).minimumSizeHint().width(), self.splitter.widget(2).minimumSizeHint().width())
        widths = column_widths(self.window.width() - handles, char_w, least)  # the splitter spans the window
        if not self.splitter.widget(2).isVisibleTo(self.window):  # the page in front has no side panels
            widths = [widths[0], widths[1] + widths[2], 0]
        self.splitter.setSizes(widths)
        runs_least = round(RUNS_LINES * metrics.lineSpacing())
        self.left.widget(1).setMinimumHeight(runs_least)
        left_height = self.left.height() - margins.top() - margins.bottom()
        self.left.setSizes(left_heights(left_height, self._controls_height(widths[0] - margins.left() - margins.right() - scrollbar), runs_least))
        self.user_sized = False

    def _controls_height(self, width: int) -> int:
        """How high the run controls want to be at `width` (their wrapped text taller when narrower)."""
        wanted = self.controls.heightForWidth(width) if self.controls.hasHeightForWidth() else -1
        return max(wanted, self.controls.sizeHint().height())

    def _moved(self, _pos: int, _index: int) -> None:
        self.user_sized = True

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt API)
        kind = event.type()
        if kind == QEvent.Type.FontChange and obj is self.window:
            self._fit_timer.start()
        elif not self.user_sized and (
            (kind == QEvent.Type.Resize and obj is self.window)
            or (kind == QEvent.Type.LayoutRequest and obj is self.controls)
            or (kind in (QEvent.Type.Show, QEvent.Type.Hide) and obj is self.splitter.widget(2))
        ):
            self._fit_timer.start()
        return False
