"""docs/cli.md, the command-line reference, written from the parsers `app/cli.py` builds.

Every sub-command gets its description, its usage and a table of its arguments, taken from the same
argparse objects `--help` prints, so the reference says what the command takes today;
`tests/app/test_cli_reference.py` fails when docs/cli.md is not what this module writes now. The text
is formatted at a fixed width (`WIDTH`), never the terminal's, so it is the same wherever it is made.
No Qt and no torch: building the parser imports neither.

    python -m branchscope.app.cli_reference [OUT.md]      # `make docs`; OUT defaults to docs/cli.md
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

from branchscope.app.cli import build_parser
from branchscope.profiling.run.modes import MODES_ENV

#: The width usage lines are wrapped at (argparse would take the terminal's).
WIDTH = 100
#: Where `make docs` writes the reference: docs/cli.md beside app/.
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

HEADER = """\
# Command-line reference

Every command and option of `branchscope`, as `--help` gives them. This file is generated from the
parsers of `app/cli.py` by `app/cli_reference.py`: run `make docs` after changing an option;
`tests/app/test_cli_reference.py` fails while it is out of date. Do not edit it by hand.
"""


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    """The parser's own formatter class, at `WIDTH` columns."""
    return parser.formatter_class(prog=parser.prog, width=WIDTH)  # type: ignore[call-arg]


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """How the argument is written: `PATH [PATH ...]` for a positional, `--out DIR` or `-h, --help`
    for an option (each spelling with its metavar, as argparse lists them)."""
    formatter = _formatter(parser)
    if not action.option_strings:
        return formatter._format_args(action, action.dest)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    args = formatter._format_args(action, action.dest.upper())
    return ", ".join(f"{option} {args}" for option in action.option_strings)


def _cell(text: str) -> str:
    """One Markdown table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _arguments_table(parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[str]:
    formatter = _formatter(parser)
    rows = ["| argument | what it does |", "| --- | --- |"]
    for action in actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{_cell(_invocation(parser, action))}` | {_cell(help_text)} |")
    return rows if len(rows) > 2 else []


def _groups(parser: argparse.ArgumentParser) -> list[str]:
    """Each argument group of the parser (positional arguments, options, a group of its own) with
    its title and its table; a group with nothing to list is left out."""
    lines: list[str] = []
    for group in parser._action_groups:
        table = _arguments_table(parser, group._group_actions)
        if table:
            lines += [f"**{group.title}**", "", *table, ""]
    return lines


def _command_section(title: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## {title}", ""]
    if parser.description:
        lines += [textwrap.fill(" ".join(parser.description.split()), WIDTH), ""]
    lines += ["```", _usage(parser), "```", ""]
    return lines + _groups(parser)


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def reference() -> str:
    """The whole of docs/cli.md: the top-level command, a table of the sub-commands, then each
    sub-command in the order `branchscope --help` lists them."""
    parser = build_parser()
    sub = _subcommands(parser)
    lines = [HEADER, "| command | what it does |", "| --- | --- |"]
    formatter = _formatter(parser)
    for choice in sub._choices_actions:  # each help string as --help expands it ("95%%" is "95%")
        lines.append(f"| [`{choice.dest}`](#branchscope-{choice.dest}) | {_cell(formatter._expand_help(choice))} |")
    lines.append("")
    lines += _command_section("branchscope", parser)
    for name, subparser in sub.choices.items():
        lines += _command_section(f"branchscope {name}", subparser)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if os.environ.get(MODES_ENV):  # the modes it names would join the --mode choices of the reference
        print(f"error: unset {MODES_ENV}: docs/cli.md lists branchscope's own modes only", file=sys.stderr)
        return 2
    out = Path(args[0]) if args else DEFAULT_OUT
    out.write_text(reference(), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
