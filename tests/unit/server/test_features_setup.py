"""How ``serve`` sets up its features: ``[apps]`` and channel targets from the TOML file, the
sample apps over the runs' SQLite file, an attention config."""

from __future__ import annotations

from pathlib import Path

import pytest

from fiduciary.exceptions import ConfigurationError
from fiduciary.server import InboundChannel
from fiduciary.server.features import open_features
from fiduciary.server.served import wallet_agent
from fiduciary.server.settings import AppsSettings, ServerConfig
from fiduciary.stores.sqlite import SQLiteStore

pytestmark = pytest.mark.timeout(60)

TOML = """
[apps]
dir = "my-apps"
principal = "alice"
tick_seconds = 2
[[channels]]
name = "desk"
principal = "alice"
secret = "0123456789abcdef0123"
target = "dca"
"""


def test_the_toml_file_names_the_apps_and_a_channel_s_target(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(TOML)
    config = ServerConfig.load(path)
    assert config.apps == AppsSettings(dir=tmp_path / "my-apps", principal="alice", tick_seconds=2)
    assert config.hook_targets() == {"desk": "dca"}
    assert ServerConfig().apps is None


async def test_the_sample_apps_over_the_runs_sqlite_file(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "f.sqlite3")
    try:
        agent = wallet_agent(store).agent
        features = await open_features(store, agent, apps=AppsSettings())
        assert features is not None
        assert features.apps is not None
        try:
            assert sorted(features.apps.manifests) == ["dca", "guardian", "sweeper"]
            assert features.inbox is features.apps.inbox
        finally:
            await features.stop()
        assert await open_features(store, agent) is None
        with pytest.raises(ConfigurationError, match="target 'nope' is not an app"):
            await open_features(store, agent, apps=AppsSettings(), hook_targets={"x": "nope"})
        desk = tmp_path / "apps" / "desk"
        desk.mkdir(parents=True)
        (desk / "app.md").write_text(
            "---\nid: desk\nhooks: [message]\ncapabilities: [balance_check]\n---\nAnswer.\n"
        )
        with pytest.raises(ConfigurationError, match="acts for bob, but the apps act for demo"):
            await open_features(
                store,
                agent,
                apps=AppsSettings(dir=tmp_path / "apps"),
                hook_targets={"x": "desk"},
                channels=[InboundChannel("x", "0123456789abcdef", "bob")],
            )
        with pytest.raises(ConfigurationError, match="serve apps"):
            await open_features(store, agent, hook_targets={"x": "dca"})
        with pytest.raises(ConfigurationError, match="no folder at"):
            await open_features(store, agent, apps=AppsSettings(dir=tmp_path / "none"))
    finally:
        await store.close()


async def test_an_attention_config_is_served(tmp_path: Path) -> None:
    config = tmp_path / "attention.toml"
    config.write_text(
        'db = "a.sqlite3"\njudge = "tests.unit.server.test_features_setup:notify_all"\n'
        '[routes.notify]\ndo = "notify"\n[routes.drop]\ndo = "drop"\n'
    )
    store = await SQLiteStore.open(tmp_path / "f.sqlite3")
    try:
        agent = wallet_agent(store).agent
        features = await open_features(store, agent, attention=config)
        assert features is not None
        assert features.attention is not None
        try:
            assert features.attention.webhooks is not None
            assert features.attention.watcher is not None
        finally:
            await features.stop()
    finally:
        await store.close()


async def test_an_attention_config_s_file_source_is_served_as_a_file(tmp_path: Path) -> None:
    """``[sources.file]`` is an ``EventsFile`` (never opened as anything else)."""
    from fiduciary.attention.events_file import EventsFile

    events = tmp_path / "events.jsonl"
    events.write_text('{"id": "e1", "type": "t", "at": "2026-03-02T08:00:00+00:00"}\n')
    config = tmp_path / "attention.toml"
    config.write_text(
        'db = "a.sqlite3"\njudge = "tests.unit.server.test_features_setup:notify_all"\n'
        '[routes.notify]\ndo = "notify"\n[sources.file]\npath = "events.jsonl"\n'
    )
    store = await SQLiteStore.open(tmp_path / "f.sqlite3")
    try:
        agent = wallet_agent(store).agent
        features = await open_features(store, agent, attention=config)
        assert features is not None
        assert features.attention is not None
        try:
            watcher = features.attention.watcher
            assert watcher is not None
            (source,) = [s for s in watcher.sources if s.name == "file"]
            assert isinstance(source, EventsFile)
            assert source.path == events
        finally:
            await features.stop()
    finally:
        await store.close()


def notify_all() -> object:
    from fiduciary.attention.testing import RuleJudge

    return RuleJudge(lambda judge_input: "notify")
