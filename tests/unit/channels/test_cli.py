"""``fiduciary telegram``: its options, refused before anything starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fiduciary.channels.cli import UsageError, parse_allow
from fiduciary.cli.app import app


def test_allow_pairs_chat_ids_with_principals() -> None:
    assert parse_allow(["111=alice", "-100222=ops team"]) == {111: "alice", -100222: "ops team"}
    for bad in ("alice", "x=alice", "111=", "0=alice"):
        with pytest.raises(UsageError, match="CHAT_ID=PRINCIPAL"):
            parse_allow([bad])
    with pytest.raises(UsageError, match="allowed twice"):
        parse_allow(["1=a", "1=b"])


def test_the_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIDUCIARY_TELEGRAM_TOKEN", raising=False)
    args = ["telegram", "--agent", "tests.unit.channels.chat_agent:factory", "--allow", "1=a"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "set FIDUCIARY_TELEGRAM_TOKEN to the bot's token" in result.output
    monkeypatch.setenv("FIDUCIARY_TELEGRAM_TOKEN", "not-a-token")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "a Telegram bot token looks like 123456:ABC-DEF..." in result.output


def test_the_core_never_imports_channels_and_the_cli_not_the_bot_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, fiduciary, fiduciary.testing, fiduciary.agent\n"
        "assert not [m for m in sys.modules if m.startswith('fiduciary.channels')]\n"
        "import fiduciary.cli.app\n"
        "assert 'fiduciary.channels.cli' in sys.modules\n"
        "assert 'telegram' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
