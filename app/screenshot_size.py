"""What `--screenshot` shares between `branchscope open` (and the window's own) and `compare`: the
`--size WxH` option and its check, and a Qt message filter.

Qt is imported only inside `drop_offscreen_size_hint_warning`, so the CLI stays Qt-free until a
picture is asked for.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

#: The picture's size when `--size` is not given.
DEFAULT_SIZE = (1600, 1000)
#: The sizes `--size` takes: an old projector's 800×600 up to 8K.
LEAST_SIZE = (800, 600)
MOST_SIZE = (7680, 4320)
#: What the offscreen platform says on every window shown; nothing is wrong (Qt's offscreen plugin
#: has no window manager to pass size hints to), so `--screenshot` does not print it.
SIZE_HINT_WARNING = "This plugin does not support propagateSizeHints()"

_SIZE = re.compile(r"\s*(\d+)\s*[x×X]\s*(\d+)\s*")


def add_size_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """`--size WxH`: the picture's size (`what`: the window, the compare view)."""
    parser.add_argument(
        "--size",
        metavar="WxH",
        help=f"with --screenshot: draw {what} at W×H pixels (e.g. 1920x1080, 1280x720; default "
        f"{DEFAULT_SIZE[0]}x{DEFAULT_SIZE[1]})",
    )


def parse_size(text: str | None) -> tuple[int, int]:
    """`"1920x1080"` → (1920, 1080); None → `DEFAULT_SIZE`. Raises ValueError saying what it takes."""
    if text is None:
        return DEFAULT_SIZE
    m = _SIZE.fullmatch(text)
    if m is None:
        raise ValueError(f"--size {text!r} is not WIDTHxHEIGHT in pixels (e.g. 1920x1080)")
    size = (int(m.group(1)), int(m.group(2)))
    if not all(lo <= v <= hi for v, lo, hi in zip(size, LEAST_SIZE, MOST_SIZE)):
        raise ValueError(
            f"--size {text} is out of range: from {LEAST_SIZE[0]}x{LEAST_SIZE[1]} to {MOST_SIZE[0]}x{MOST_SIZE[1]}"
        )
    return size


def size_text(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"


def wrote_line(out: object, drawn: tuple[int, int], asked: tuple[int, int]) -> str:
    """"wrote OUT (WxH)": the picture's own size; where the view could not be drawn as small as
    asked (its least size is more), that is said too."""
    if drawn == asked:
        return f"wrote {out} ({size_text(drawn)})"
    return f"wrote {out} ({size_text(drawn)}: the least it can be drawn at; asked {size_text(asked)})"


def drop_offscreen_size_hint_warning() -> None:
    """Install a Qt message handler that drops exactly `SIZE_HINT_WARNING` and passes every other
    message on (to the handler installed before, else to stderr as Qt formats it)."""
    import sys

    from PySide6.QtCore import qFormatLogMessage, qInstallMessageHandler

    def handler(mode, context, message: str) -> None:
        if message.strip() == SIZE_HINT_WARNING:
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            sys.stderr.write(qFormatLogMessage(mode, context, message) + "\n")

    if getattr(drop_offscreen_size_hint_warning, "installed", False):
        return
    previous = qInstallMessageHandler(handler)
    drop_offscreen_size_hint_warning.installed = True  # type: ignore[attr-defined]


def settle_at(app: Any, widget: Any, size: tuple[int, int]) -> None:
    """Before a picture: `widget` lays out what it shows, then is held at `size` (what it opened may
    have asked for more room: the picture is the size asked), and lays out again."""
    app.processEvents()
    widget.resize(*size)
    app.processEvents()
