"""The one protocol every page (a centre tab of the window) follows, and what a page may ask of the
window. Pages register in `app/pages/__init__.PAGES`; the window builds its tabs from that list.

A page is a widget made with the window (`Page(host)`). What it shows of the shown run it takes
from the window's model of what is shown (`host.shown`, `app/shown.py`): it subscribes, in its
`__init__`, to the trace about to be shown (all or nothing: a page that cannot show it raises and
leaves itself as it was, one that shows it returns how to go back), the entry shown, and the time
range selected in the timeline. The window asks it `tab_enabled()` (whether its tab can be chosen
for the trace shown), `fits(trace)` (whether showing `trace` brings it to the front: the first page
that fits, else the first page) and `side_panels` (whether the side panels, which describe the run
shown, stand beside it).

Pages find each other by type through the window (`host.page(RunPage)`), never by position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from branchscope.app.shown import Undo

if TYPE_CHECKING:
    from PySide6.QtWidgets import QStatusBar

    from branchscope.app.run_controller import RunController
    from branchscope.app.runs import Runs, RunSpec
    from branchscope.app.shown import Shown
    from branchscope.app.trace_loader import TraceLoader
    from branchscope.profiling.trace.model import Trace

P = TypeVar("P")


@runtime_checkable
class Page(Protocol):
    #: Whether the side panels (branch legend, details, range and steps) stand beside this page.
    side_panels: bool

    def tab_enabled(self) -> bool:
        """Whether this page's tab can be chosen for the trace shown."""

    def fits(self, trace: Trace) -> bool:
        """Whether showing `trace` brings this page to the front."""


class OwnContentPage:
    """What a page that shows content of its own (a comparison, a sweep), whatever run is shown,
    says to the window: it follows nothing of what is shown, its tab is always there, and no trace
    brings it to the front. Such a page inherits these and overrides what differs."""

    side_panels = False

    def tab_enabled(self) -> bool:
        return True

    def fits(self, trace: Trace) -> bool:
        return False


def all_or_nothing(show: Callable[..., None], before: tuple[Any, ...], after: tuple[Any, ...]) -> Undo:
    """`show(*after)`; if that raises, `show(*before)` (what was shown) and raise again. Returns how
    to go back (`show(*before)`), as a view following `Shown.trace_changing` does."""
    try:
        show(*after)
    except Exception:
        try:
            show(*before)
        except Exception:  # pragma: no cover - what was there before was shown without error
            pass
        raise
    return lambda: show(*before)


class PageHost(Protocol):
    """What a page may ask of the window (`MainWindow`)."""

    #: The runs and opened traces (`app/runs.py`).
    run_list: Runs
    #: What is shown (`app/shown.py`): pages subscribe to it.
    shown: Shown
    #: The window's one loader (`app/trace_loader.py`).
    loader: TraceLoader
    controller: RunController
    #: The CPUs this process may use.
    cores: int

    def page(self, kind: type[P]) -> P:
        """The window's page of type `kind`."""

    def show_page(self, page: Any) -> None:
        """Bring `page`'s tab to the front."""

    def current_spec(self) -> RunSpec:
        """What the run controls say to run."""

    def show_entry(self, k: int) -> bool:
        """Show entry k in every view (False, with a dialog, if it cannot be shown)."""

    def open_trace_files(self, paths: list[str]) -> int:
        """Open trace files, run folders and sweep folders; how many opened."""

    def show_error(self, title: str, message: str, details: str = "") -> Any:
        """A non-blocking error dialog."""

    def statusBar(self) -> QStatusBar:  # noqa: N802 (Qt API)
        """Where the window says what it does."""
