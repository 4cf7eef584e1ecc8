"""docs/cli.md is the reference `app/cli_reference.py` writes from the parsers now: an option added,
renamed or reworded without `make docs` fails here."""

from __future__ import annotations

import argparse
import os

from branchscope.app import cli_reference
from branchscope.app.cli import build_parser
from branchscope.profiling.run.modes import MODES_ENV


def test_docs_cli_md_is_what_the_generator_writes_now():
    written = cli_reference.DEFAULT_OUT.read_text(encoding="utf-8")
    assert written == cli_reference.reference(), (
        "docs/cli.md is out of date with the parsers of app/cli.py: regenerate it with `make docs` "
        "(python -m branchscope.app.cli_reference) and commit it"
        + (f"; {MODES_ENV} is set, and its modes join the --mode choices" if os.environ.get(MODES_ENV) else "")
    )


def test_the_reference_names_every_command_and_option():
    text = cli_reference.reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, subparser in sub.choices.items():
        assert f"\n## branchscope {name}\n" in text
        for action in subparser._actions:
            for option in action.option_strings:
                assert f"`{option}" in text or f", {option}" in text, f"{name} {option}"


def test_the_reference_does_not_follow_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = cli_reference.reference()
    monkeypatch.setenv("COLUMNS", "250")
    assert cli_reference.reference() == narrow
    assert max(len(line) for line in narrow.splitlines() if not line.startswith("|")) <= cli_reference.WIDTH
