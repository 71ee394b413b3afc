"""``attention.toml``: what ``fiduciary attention run --config`` watches and how it routes.

```toml
db = ".fiduciary/fiduciary.sqlite3"   # the store's file; the attention tables live in it too
model = "anthropic:claude-haiku-4-5"  # the judge's model (or judge = "module:attribute");
                                      # "scripted": an offline keyword rule, no key needed
agent = "myapp.agents:make_agent"     # needed by routes that start runs: (store) -> Agent
context_tokens = 200000               # optional: the judge's budget
window_size = 64

[routes.act]
do = "run"                            # run | notify | drop
criterion = "the agent should act now"
principal = "alice"                   # else the event's own principal
capabilities = ["balance", "send"]    # else every capability of the agent
plan_first = true                     # the default
message = "Look into {type}: {data}"
autonomous = { save = "20" }          # optional: operation -> USD a call may move without
                                      # a person (none by default: a person approves writes)

[routes.notify]
do = "notify"

[routes.drop]
do = "drop"

[[predicates]]
name = "urgent"
question = "Does this need someone within the hour?"

[sources.fiduciary]                   # the store's own events
every = 5

[sources.wallet]                      # a paper wallet file
path = ".fiduciary/wallet.sqlite3"
principals = ["alice"]
every = 60

[sources.file]                        # events appended to a JSON lines file (events_file.py)
path = "events.jsonl"
every = 5
```
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..exceptions import ConfigurationError
from .actions import RouteAction
from .types import Predicate

__all__ = ["AttentionConfig", "load_config"]

_ACTIONS = ("run", "notify", "drop")
_SOURCES = ("fiduciary", "wallet", "file")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionConfig:
    db: Path
    routes: dict[str, RouteAction]
    model: str | None = None
    judge: str | None = None
    agent: str | None = None
    system: str | None = None
    context_tokens: int | None = None
    window_size: int = 64
    predicates: tuple[Predicate, ...] = ()
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)


def _route(name: str, raw: object) -> RouteAction:
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"routes.{name} must be a table")
    do = raw.get("do")
    if do not in _ACTIONS:
        raise ConfigurationError(f"routes.{name}.do must be one of {', '.join(_ACTIONS)}")
    unknown = set(raw) - {"do", "criterion", "principal", "capabilities", "plan_first", "message"}
    unknown -= {"autonomous"}
    if unknown:
        raise ConfigurationError(f"routes.{name} has unknown keys: {', '.join(sorted(unknown))}")
    caps = raw.get("capabilities")
    options: dict[str, Any] = {
        k: raw[k] for k in ("criterion", "principal", "plan_first", "message") if k in raw
    }
    return RouteAction(
        do=do,
        capabilities=None if caps is None else tuple(str(c) for c in caps),
        **options,
        **_autonomous(name, raw),
    )


def _autonomous(name: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The route's autonomous budget, checked: operation -> USD amount (never a float)."""
    table = raw.get("autonomous")
    if table is None:
        return {}
    where = f"routes.{name}.autonomous"
    if not isinstance(table, Mapping):
        raise ConfigurationError(f'{where} must be a table: operation = "USD amount"')
    budget: dict[str, Decimal] = {}
    for op, usd in table.items():
        try:
            money = isinstance(usd, str | int) and not isinstance(usd, bool)
            amount = Decimal(usd) if money else None
        except InvalidOperation:
            amount = None
        if amount is None or not amount.is_finite() or amount < 0:
            raise ConfigurationError(f'{where}.{op} must be an amount in USD, e.g. "20"')
        budget[str(op)] = amount
    return {"autonomous": budget}


def load_config(path: Path) -> AttentionConfig:
    """Read and check ``path`` (paths in it are relative to the file)."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from exc
    routes_raw = raw.get("routes")
    if not isinstance(routes_raw, Mapping) or not routes_raw:
        raise ConfigurationError(f"{path} needs at least one [routes.NAME] table")
    routes = {str(k): _route(str(k), v) for k, v in routes_raw.items()}
    if raw.get("model") is None and raw.get("judge") is None:
        raise ConfigurationError(f"{path} names no judge: set model = ... or judge = ...")
    if any(r.do == "run" for r in routes.values()) and raw.get("agent") is None:
        raise ConfigurationError(f"{path}: a route starts runs, so agent = ... is required")
    base = path.parent
    db = base / str(raw.get("db", ".fiduciary/fiduciary.sqlite3"))
    sources: dict[str, dict[str, Any]] = {}
    for name, table in (raw.get("sources") or {}).items():
        if name not in _SOURCES:
            raise ConfigurationError(f"unknown source {name!r}: {', '.join(_SOURCES)}")
        if not isinstance(table, Mapping):
            raise ConfigurationError(f"sources.{name} must be a table")
        options = dict(table)
        every = options.get("every", 1)
        if isinstance(every, bool) or not isinstance(every, int | float) or not every > 0:
            raise ConfigurationError(f"sources.{name}.every must be a number of seconds above 0")
        if name == "file" and not isinstance(options.get("path"), str):
            raise ConfigurationError('sources.file needs path = "events.jsonl" (a JSON lines file)')
        if "path" in options:
            options["path"] = str(base / str(options["path"]))
        sources[name] = options
    predicates = tuple(
        Predicate(name=str(p["name"]), question=str(p["question"]))
        for p in raw.get("predicates", [])
    )
    context_tokens = raw.get("context_tokens")
    return AttentionConfig(
        db=db,
        routes=routes,
        model=raw.get("model"),
        judge=raw.get("judge"),
        agent=raw.get("agent"),
        system=raw.get("system"),
        context_tokens=None if context_tokens is None else int(context_tokens),
        window_size=int(raw.get("window_size", 64)),
        predicates=predicates,
        sources=sources,
    )
