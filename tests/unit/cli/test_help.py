"""``--help`` as a person reads it: each paragraph whole on one line of a wide terminal (rich
wraps it at the terminal's width, never where a docstring's line ended), nothing in brackets
swallowed as markup."""

from __future__ import annotations

from typing import Any

import pytest

from fiduciary.cli.app import command_tree

from .support import fiduciary

pytestmark = pytest.mark.timeout(120)


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _commands(sub, (*path, name))
    return found


TREE = command_tree()
COMMANDS = _commands(TREE)


def _plain(text: str) -> str:
    return text.replace("\\[", "[")  # the help is rich markup: an escaped bracket is shown as one


IDS = [" ".join(p) or "-" for p, _ in COMMANDS]


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=IDS)
def test_each_help_paragraph_is_one_line(
    path: tuple[str, ...],
    command: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # in this process (the tree the console script runs), on a wide terminal
    monkeypatch.setenv("COLUMNS", "400")
    code = TREE.main([*path, "--help"], prog_name="fiduciary", standalone_mode=False)
    assert code in (0, None)
    lines = [" ".join(line.strip(" │").split()) for line in capsys.readouterr().out.splitlines()]
    for paragraph in (command.help or "").split("\n\n"):
        if "\n" in paragraph:  # a list keeps its lines
            continue
        assert any(_plain(paragraph) in line for line in lines), paragraph


def test_a_docstring_is_reflowed_not_broken() -> None:
    demo = dict((" ".join(p), c) for p, c in COMMANDS)["demo"]
    assert all("\n" not in paragraph for paragraph in demo.help.split("\n\n"))
    shown = fiduciary("demo", "--help", columns=80).stdout  # as a person runs it
    assert "send that waits for\n" not in shown  # where the docstring's line ended
    assert "send that waits for you, a refused send" in " ".join(shown.replace("│", "").split())
