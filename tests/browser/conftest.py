"""The browser tests run on the session's event loop, so that one Chromium serves them all
(``served_page.shared_browser``; each test has a browser context of its own), stopped at the
session's end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every async test of this folder on the session's loop (the loop the browser lives on)."""
    on_session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if item.path.is_relative_to(HERE) and pytest_asyncio.is_async_test(item):
            item.add_marker(on_session_loop, append=False)


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def one_chromium() -> AsyncIterator[None]:
    """Stops the shared Chromium once the session's browser tests are done."""
    yield
    from .served_page import close_shared_browser  # (imports playwright: only when one runs)

    await close_shared_browser()
