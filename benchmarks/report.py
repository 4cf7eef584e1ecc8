"""What a benchmark does last: write its figures as JSON (benchmarks/results/ by default) and say where.

The benchmarks run as scripts (`python benchmarks/bench_x.py`), so this folder is on their path.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine_words() -> str:
    """The machine and Python that ran, in a few words: "x86_64, CPython 3.11.9"."""
    return f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}"


def write_report(out: str | Path, report: dict, indent: int = 1) -> None:
    """`report` as JSON into `out` (its folder made), and a line saying where (relative to the
    checkout when it is inside it)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=indent) + "\n")
    shown = out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    print(f"\nwrote {shown}")
