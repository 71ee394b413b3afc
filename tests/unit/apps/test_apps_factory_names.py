"""Where the apps factory is named: the wallet's sample apps are the default of the entry
points (``fiduciary.wallet.apps:paper_engine``), the name they had before they moved into the
wallet still loads them, and ``fiduciary apps --apps-engine`` takes another factory."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fiduciary.apps.served import ServedApps
from fiduciary.apps.tables import AppTables
from fiduciary.cli._common import DEFAULT_APPS_ENGINE, apps_engine
from fiduciary.cli.app import app
from fiduciary.server.settings import AppsSettings
from fiduciary.stores.base import Store
from fiduciary.wallet.apps import paper_engine

runner = CliRunner()


def only_dca(store: Store, tables: AppTables, principal: str) -> ServedApps:
    """An apps factory of a user's own: the sample engine with the dca app alone."""
    served = paper_engine(store, tables, principal)
    served.engine.manifests = {"dca": served.engine.manifests["dca"]}
    return served


def test_the_default_is_the_wallets_sample_apps_and_the_old_name_still_loads() -> None:
    assert DEFAULT_APPS_ENGINE == "fiduciary.wallet.apps:paper_engine"
    assert AppsSettings().engine == DEFAULT_APPS_ENGINE
    assert apps_engine(None) == DEFAULT_APPS_ENGINE
    assert apps_engine("fiduciary.apps.served:paper_engine") == DEFAULT_APPS_ENGINE
    assert apps_engine("my.apps:engine") == "my.apps:engine"


def test_fiduciary_apps_lists_the_apps_of_the_factory_it_is_given(tmp_path: Path) -> None:
    db = str(tmp_path / "f.sqlite3")
    default = runner.invoke(app, ["apps", "list", "--db", db], env={"COLUMNS": "200"})
    assert default.exit_code == 0, default.output
    assert {"dca", "sweeper", "guardian"} <= set(default.output.split())
    mine = runner.invoke(
        app,
        ["apps", "list", "--db", db, "--apps-engine", f"{__name__}:only_dca"],
        env={"COLUMNS": "200"},
    )
    assert mine.exit_code == 0, mine.output
    assert "dca" in mine.output.split()
    assert "sweeper" not in mine.output.split()
    old = runner.invoke(
        app,
        ["apps", "list", "--db", db, "--apps-engine", "fiduciary.apps.served:paper_engine"],
        env={"COLUMNS": "200"},
    )
    assert old.exit_code == 0, old.output
    assert "guardian" in old.output.split()


def test_an_apps_factory_that_is_no_engine_is_one_clear_error(tmp_path: Path) -> None:
    db = str(tmp_path / "f.sqlite3")
    made = runner.invoke(
        app, ["apps", "list", "--db", db, "--apps-engine", f"{__name__}:not_an_engine"]
    )
    assert made.exit_code == 2, made.output
    assert "must return an AppEngine or a ServedApps" in made.output


def not_an_engine(store: Store, tables: AppTables, principal: str) -> object:
    return object()
