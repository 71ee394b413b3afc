"""The Bot API stand-in, served on a local port for one test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .botapi import BotApi, serving

TOKEN = "123456:AAF-canaryTOKENcanary_0123456789abcdef"


@pytest.fixture
def standin() -> Iterator[tuple[BotApi, str]]:
    api = BotApi(TOKEN)
    with serving(api) as url:
        yield api, url
