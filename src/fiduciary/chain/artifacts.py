"""The compiled contracts (``artifacts/NAME.json``: abi and bytecode), built by
``contracts/compile.mjs`` with the solc-js that package-lock.json pins."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["abi_of", "artifact"]


@cache
def artifact(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("artifacts", f"{name}.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def abi_of(name: str) -> list[dict[str, Any]]:
    abi: list[dict[str, Any]] = artifact(name)["abi"]
    return abi
