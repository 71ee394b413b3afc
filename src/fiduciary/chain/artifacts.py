"""The compiled contracts (``artifacts/NAME.json``: abi and bytecode), built by
``contracts/compile.mjs`` with the solc-js that package-lock.json pins."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["abi_of", "artifact", "published_abi"]


@cache
def artifact(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("artifacts", f"{name}.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def published_abi(name: str) -> list[dict[str, Any]]:
    """The ABI of a contract deployed from a package's published build (``published/``)."""
    folder = resources.files(__package__).joinpath("artifacts", "published")
    abi: list[dict[str, Any]] = json.loads(folder.joinpath(f"{name}.json").read_text("utf-8"))[
        "abi"
    ]
    return abi


def abi_of(name: str) -> list[dict[str, Any]]:
    abi: list[dict[str, Any]] = artifact(name)["abi"]
    return abi
