"""The `branchscope` command: one parser, each sub-command's options and handler in its own module.

No Qt and no torch are imported here: `inspect` and `profile` must start fast and work headless,
and the GUI modules are imported only when the window is asked for.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    from branchscope.app import cmd_compare, cmd_gui, cmd_inspect, cmd_memory, cmd_profile, cmd_sweep

    parser = argparse.ArgumentParser(
        prog="branchscope",
        description="Profile and visualize parallel branches, threads, streams and memory of PyTorch models.",
    )
    cmd_gui.add_window_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cmd_inspect.register(sub)
    cmd_profile.register(sub)
    cmd_compare.register(sub)
    cmd_sweep.register(sub)
    cmd_memory.register(sub)
    cmd_gui.register(sub)
    parser.set_defaults(handler=cmd_gui.run_default)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
