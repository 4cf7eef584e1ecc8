"""The one protocol every page (a centre tab of the window) follows, and what a page may ask of the
window. Pages register in `app/pages/__init__.PAGES`; the window builds its tabs from that list.

A page is a widget made with the window (`Page(host)`). The window tells every page, in tab order:

- `show_trace(trace, entry)`: the trace of the entry about to be shown. Showing is all or nothing,
  as for the workspace's panels: a page that cannot show the trace raises and leaves itself as it
  was; one that shows it returns how to go back (or None: nothing to undo). Should a page, or a
  side panel, raise, the window calls those, newest first, and every view shows what it showed
  before;
- `entry_shown(entry)`: `entry` is now the one shown; called again when what the runs list knows
  of it changes (a new baseline changes how it compares);
- `select_range(start_ns, end_ns)`: a time range was selected in the shown trace's timeline.

and asks it `tab_enabled()` (whether its tab can be chosen for the trace shown), `fits(trace)`
(whether showing `trace` brings it to the front: the first page that fits, else the first page)
and `side_panels` (whether the side panels, which describe the run shown, stand beside it).

Pages find each other by type through the window (`host.page(RunPage)`), never by position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from branchscope.app.run_controller import RunController
    from branchscope.app.runs import Entry, Runs, RunSpec
    from branchscope.profiling.trace.model import Trace

#: What `Page.show_trace` returns: how to go back to what the page showed before (None: nothing to undo).
Undo = Callable[[], None] | None
P = TypeVar("P")


@runtime_checkable
class Page(Protocol):
    #: Whether the side panels (branch legend, details, range and steps) stand beside this page.
    side_panels: bool

    def show_trace(self, trace: Trace, entry: Entry) -> Undo:
        """Show the trace of `entry`, about to be the one shown, all or nothing (see the module docstring)."""

    def entry_shown(self, entry: Entry) -> None:
        """`entry` is the one shown (again, when what is known of it changed)."""

    def select_range(self, start_ns: int, end_ns: int) -> None:
        """A time range was selected in the shown trace's timeline (on the trace's own clock)."""

    def tab_enabled(self) -> bool:
        """Whether this page's tab can be chosen for the trace shown."""

    def fits(self, trace: Trace) -> bool:
        """Whether showing `trace` brings this page to the front."""


class OwnContentPage:
    """What a page that shows content of its own (a comparison, a sweep), whatever run is shown,
    says to the window: it takes no part in showing a trace, its tab is always there, and no trace
    brings it to the front. Such a page inherits these and overrides what differs."""

    side_panels = False

    def show_trace(self, trace: Trace, entry: Entry) -> Undo:
        return None

    def entry_shown(self, entry: Entry) -> None:
        pass

    def select_range(self, start_ns: int, end_ns: int) -> None:
        pass

    def tab_enabled(self) -> bool:
        return True

    def fits(self, trace: Trace) -> bool:
        return False


def all_or_nothing(show: Callable[..., None], before: tuple[Any, ...], after: tuple[Any, ...]) -> Undo:
    """`show(*after)`; if that raises, `show(*before)` (what was shown) and raise again. Returns how
    to go back (`show(*before)`), as `Page.show_trace` does."""
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
