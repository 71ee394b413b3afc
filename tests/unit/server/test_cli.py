"""``fiduciary keys create | list | revoke`` and ``fiduciary serve``."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fiduciary.exceptions import ConfigurationError
from fiduciary.server import SQLiteKeyStore
from fiduciary.server.cli import ServerConfig, register
from fiduciary.server.served import ServedAgent, demo_agent, load_factory
from fiduciary.testing import MemoryStore

pytestmark = pytest.mark.timeout(60)

app = typer.Typer()
register(app)
runner = CliRunner()


def test_keys_create_list_revoke(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "f.sqlite3"
    result = runner.invoke(
        app, ["keys", "create", "--db", str(db), "--principal", "alice", "--label", "phone"]
    )
    assert result.exit_code == 0, result.output
    key = result.stdout.strip().splitlines()[0]
    assert key.startswith("fid_")
    store = SQLiteKeyStore(db)
    record = asyncio.run(store.verify(key))
    store.close()
    assert record is not None
    assert record.principal == "alice"
    assert record.scopes == frozenset({"runs:read", "runs:write", "approvals:decide"})
    with sqlite3.connect(db) as conn:
        assert key not in str(conn.execute("SELECT * FROM server_api_keys").fetchall())
    listed = runner.invoke(app, ["keys", "list", "--db", str(db)])
    assert listed.exit_code == 0
    assert record.key_id in listed.stdout
    assert key not in listed.stdout
    assert runner.invoke(app, ["keys", "revoke", record.key_id, "--db", str(db)]).exit_code == 0
    again = runner.invoke(app, ["keys", "revoke", record.key_id, "--db", str(db)])
    assert again.exit_code == 1
    admin = runner.invoke(
        app, ["keys", "create", "--db", str(db), "--principal", "ops", "--scope", "admin"]
    )
    assert admin.exit_code == 0
    bad = runner.invoke(
        app, ["keys", "create", "--db", str(db), "--principal", "ops", "--scope", "root"]
    )
    assert bad.exit_code == 2
    assert "unknown scopes" in bad.output
    assert runner.invoke(app, ["keys", "list", "--db", str(tmp_path / "none")]).exit_code == 2


def test_serve_builds_the_app_and_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    seen: dict[str, Any] = {}

    async def serve(self: uvicorn.Server, sockets: Any = None) -> None:
        seen["addresses"] = [sock.getsockname()[:2] for sock in sockets]
        seen["app"] = self.config.app

    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    config = tmp_path / "server.toml"
    config.write_text(
        'rate_limit = "3/10"\n'
        '[[channels]]\nname = "chat"\nprincipal = "demo-user"\nsecret_env = "CHAT_SECRET"\n'
        '[[notify]]\nurl = "https://hooks.example.com/x"\nsecret = "0123456789abcdef"\n'
    )
    monkeypatch.setenv("CHAT_SECRET", "a-very-secret-value")
    db = tmp_path / "serve.sqlite3"
    result = runner.invoke(app, ["serve", "--db", str(db), "--port", "0", "--config", str(config)])
    assert result.exit_code == 0, result.output
    [(host, port)] = seen["addresses"]  # bound and listening before uvicorn is handed them
    assert host == "127.0.0.1"
    assert port > 0
    server = seen["app"].state.server
    assert server.limiter.rule.limit == 3
    assert set(server.channels) == {"chat"}
    assert server.notifier is not None
    assert server.balances_hook is not None
    assert "no API keys yet" in result.output
    assert db.exists()


def test_serve_refuses_bad_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MISSING_SECRET", raising=False)
    config = tmp_path / "bad.toml"
    config.write_text(
        '[[channels]]\nname = "chat"\nprincipal = "x"\nsecret_env = "MISSING_SECRET"\n'
    )
    result = runner.invoke(
        app, ["serve", "--db", str(tmp_path / "x.sqlite3"), "--config", str(config)]
    )
    assert result.exit_code == 2
    assert "MISSING_SECRET" in result.output
    config.write_text("nonsense = 1\n")
    assert runner.invoke(app, ["serve", "--config", str(config)]).exit_code == 2
    assert runner.invoke(app, ["serve", "--rate-limit", "lots"]).exit_code == 2


def test_agent_factories() -> None:
    made = demo_agent(MemoryStore())
    assert isinstance(made, ServedAgent)
    assert made.balances is not None
    assert load_factory("fiduciary.server.served:demo_agent") is demo_agent
    for bad in ["nope", "fiduciary.nothing:x", "fiduciary.server.served:DEFAULT_AGENT"]:
        with pytest.raises(ConfigurationError):
            load_factory(bad)
    assert ServerConfig.load(None).rate_limit == "10/60"
