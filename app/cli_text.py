"""What the sub-commands print the same way: sizes, and the one `error:` line. No Qt, no torch."""

from __future__ import annotations

import sys

from branchscope.profiling.run.protocol import EXIT_BAD_INPUT, error_line


def bytes_text(n: float | None) -> str:
    """1536 -> "1.50 KiB", 600 -> "600 B", None -> "-"."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"  # pragma: no cover - the loop returns at GiB


def fail(message: object, code: int = EXIT_BAD_INPUT) -> int:
    """Print `error: MESSAGE` (one line) on stderr; returns `code` (2: bad input) for the handler to return."""
    print(error_line(message), file=sys.stderr, flush=True)
    return code
