"""An apps factory (``--apps-engine tests.grant_engine:engine``) for the command-line tests of
an app's grant request: the engine of ``tests.faults.grant_child`` (the ``sweeper`` app asks
for a grant, then saves within it), its saves counted in the SQLite file ``$GRANT_EFFECTS``."""

from __future__ import annotations

import os
from pathlib import Path

from fiduciary.apps import AppEngine
from fiduciary.apps.tables import AppTables
from fiduciary.stores.base import Store
from tests.faults.grant_child import build


def engine(store: Store, tables: AppTables, principal: str) -> AppEngine:
    """The grant-request engine (it acts for alice, whatever ``principal`` says)."""
    return build(store, tables, Path(os.environ["GRANT_EFFECTS"]))
