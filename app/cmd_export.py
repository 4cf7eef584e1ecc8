"""`branchscope export SOURCE OUT [--force]`: what branchscope opens, written for other tools:
Perfetto's protobuf for OUT.pftrace / OUT.perfetto-trace, Chrome JSON for OUT.json / OUT.json.gz
(`profiling.trace.export`).

An existing OUT is refused unless --force (which replaces only a regular file), and so is an OUT
that is the source or lies inside the source folder; OUT appears whole or not at all (written under
a temporary name and renamed; Ctrl-C leaves nothing and exits 130 with one line).
"""

from __future__ import annotations

import argparse

from branchscope.app.cli_text import bytes_text, fail
from branchscope.profiling import TraceFormatError
from branchscope.profiling.trace.export import export_format, export_trace

#: The exit status of an export stopped by Ctrl-C (128 + SIGINT, as a shell gives).
EXIT_INTERRUPTED = 130


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a trace or run as Perfetto protobuf (.pftrace) or Chrome JSON (.json, .json.gz)",
        description="Write what branchscope opens (a run folder, a trace, a rank folder or distributed run, a "
        "sweep's cell) to OUT for other tools: Perfetto's protobuf when OUT ends in .pftrace or .perfetto-trace "
        "(events that overlap on one thread on tracks of their own, so Perfetto's UI draws them right; memory, "
        "CPU samples and the inter-op pool as counter tracks), Chrome JSON for .json and .json.gz. A job's ranks "
        "are one trace with a process per rank. An existing OUT is refused unless --force.",
    )
    p.add_argument("source", metavar="SOURCE", help="a trace file, a run folder, a rank folder or a sweep's cell folder")
    p.add_argument("out", metavar="OUT", help="the file to write: .pftrace, .perfetto-trace, .json or .json.gz")
    p.add_argument("--force", action="store_true", help="replace OUT if it is a file that exists")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        fmt = export_format(args.out)
        out = export_trace(args.source, args.out, force=args.force)
        size = out.stat().st_size
    except (TraceFormatError, OSError) as exc:
        return fail(exc)
    except KeyboardInterrupt:  # the temporary file is already removed (`export.write_file`)
        return fail(f"{args.out}: interrupted, nothing written", EXIT_INTERRUPTED)
    print(f"wrote {out} ({fmt}, {bytes_text(size)})")
    return 0
