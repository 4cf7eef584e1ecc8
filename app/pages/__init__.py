"""The window's centre tabs ("pages"), in order: a new page is one file in `app/pages/` plus one line
in `PAGES`.

Each page is a widget following `app/pages/page.py`'s protocol: the window builds its tabs from
`PAGES`, tells every page what it shows (a trace, then the entry shown, a time range selected in
the timeline), asks each whether its tab can be chosen, which one comes to the front for a trace,
and whether the side panels (branch legend, details, range and steps) stand beside it.

This module imports no Qt: `branchscope open --tab KEY` takes its choices from here, and the
command line stays Qt-free until a window opens. A page's class is imported when the window
builds its tabs (`PageKind.load`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from branchscope.app.pages.page import Page, PageHost


@dataclass(frozen=True)
class PageKind:
    """One centre tab of the window."""

    #: The page's name on the command line (`branchscope open --tab KEY`).
    key: str
    #: The tab's text.
    title: str
    #: Its class, as "module:Class": a module of `app/pages/`, or one named in full (a page of a
    #: test). A Qt widget, so imported only by `load`.
    page: str

    def load(self) -> type[Page]:
        module, _, name = self.page.partition(":")
        return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), name)

    def make(self, host: PageHost) -> Page:
        """The page, for the window `host`."""
        return self.load()(host)


PAGES: list[PageKind] = [
    PageKind("run", "Run", "run_page:RunPage"),
    PageKind("memory", "Memory", "memory_page:MemoryPage"),
    PageKind("compare", "Compare", "compare_page:ComparePage"),
    PageKind("sweep", "Sweep", "sweep_page:SweepPage"),
]


def page_keys() -> tuple[str, ...]:
    """The pages' command-line names, in tab order."""
    return tuple(kind.key for kind in PAGES)
