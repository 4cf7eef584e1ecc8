"""`branchscope --help` and each sub-command's `--help` print their text and exit 0 (argparse formats
every help string with %: a bare "95%" in one made the top-level help raise a TypeError)."""

from __future__ import annotations

import pytest

from branchscope.app.cli import build_parser


def _commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("argv", [[], *[[c] for c in _commands()]], ids=lambda a: " ".join(a) or "branchscope")
def test_help_prints_and_exits_0(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*argv, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: branchscope") and "--help" in out


def test_the_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert all(f"    {c} " in out or f"    {c}\n" in out for c in _commands())
    assert "speedups with 95% intervals" in out


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_a_description_paragraph(command, capsys):
    """`branchscope COMMAND --help` says what the command does in a paragraph of its own between the
    usage and the arguments (argparse's `description=`), not only the one-line `help=` of the list."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    description = sub.choices[command].description  # type: ignore[index]
    assert description and len(description.split()) >= 4, f"{command} has no description"
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    paragraphs = capsys.readouterr().out.split("\n\n")
    assert paragraphs[0].startswith(f"usage: branchscope {command}")
    assert " ".join(paragraphs[1].split()) == " ".join(description.split())
