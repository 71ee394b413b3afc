"""A small world for the apps tests: a paper book of calls, capabilities, a scripted model."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from fiduciary import CallContext, Capability, ManualClock, MemoryStore, PendingAction, capability
from fiduciary.apps import AppEngine, Manifest, MemoryAppTables, parse_manifest
from fiduciary.stores.base import ApprovalRecord, Store
from fiduciary.testing import Reply, Results, Script, ScriptedModel, allow_all

Answer = Callable[[dict[str, Any]], dict[str, Any]]


class Book:
    """What the capabilities did, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: set[str] = set()

    def capabilities(self) -> list[Capability]:
        book = self

        def usd(args: Any, ctx: CallContext) -> Decimal:
            return Decimal(str(args.usd))

        @capability
        def balance() -> dict[str, str]:
            """The balance."""
            return {"usdc": "1000"}

        @capability(kind="execute", operation="swap", amount_usd=usd)
        def buy(asset: str, usd: Decimal) -> dict[str, str]:
            """Buy an asset for USD."""
            if "buy" in book.fail:
                raise RuntimeError("the market is closed")
            book.calls.append(("buy", {"asset": asset, "usd": str(usd)}))
            return {"bought": asset, "usd": str(usd)}

        @capability(kind="execute", operation="save", amount_usd=usd)
        def save(usd: Decimal) -> dict[str, str]:
            """Move USD to savings."""
            book.calls.append(("save", {"usd": str(usd)}))
            return {"saved": str(usd)}

        @capability(kind="execute", operation="repay", amount_usd=usd)
        def repay(usd: Decimal) -> dict[str, str]:
            """Repay a loan."""
            book.calls.append(("repay", {"usd": str(usd)}))
            return {"repaid": str(usd)}

        @capability(kind="execute", operation="send", amount_usd=usd)
        def send(to: str, usd: Decimal) -> dict[str, str]:
            """Send USD."""
            book.calls.append(("send", {"to": to, "usd": str(usd)}))
            return {"sent": str(usd)}

        return [balance, buy, save, repay, send]


def context_of(results: Results) -> dict[str, Any]:
    prompt = results.user_messages[0]
    body = prompt.split("Context:\n", 1)[1].split("\n\nAnswer with", 1)[0]
    value: dict[str, Any] = json.loads(body)
    return value


class Hooks:
    """The scripted model's answers per (app, hook), and how often each was asked."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Answer] = {}
        self.calls: dict[tuple[str, str], int] = {}

    def on(self, app: str, hook: str, answer: Answer) -> None:
        self.answers[(app, hook)] = answer

    def model(self) -> ScriptedModel:
        hooks = self

        def matcher(text: str) -> bool:
            return text.startswith("[app ")  # a hook without an answer answers {}

        def reply(results: Results) -> str:
            first = results.user_messages[0]
            for key, answer in hooks.answers.items():
                if first.startswith(f"[app {key[0]}] hook {key[1]}\n"):
                    hooks.calls[key] = hooks.calls.get(key, 0) + 1
                    return json.dumps(answer(context_of(results)))
            hook = first.split("] hook ", 1)[1].split("\n", 1)[0]
            key = (first[5:].split("]", 1)[0], hook)
            hooks.calls[key] = hooks.calls.get(key, 0) + 1
            return "{}"

        return ScriptedModel([Script(match=matcher, steps=[Reply(reply)])])


def manifest(text: str, book: Book | None = None, sources: tuple[str, ...] = ()) -> Manifest:
    caps = (book or Book()).capabilities()
    return parse_manifest(text, capabilities={c.name: c.operation for c in caps}, sources=sources)


def engine(
    *manifests: str,
    book: Book,
    hooks: Hooks,
    clock: ManualClock,
    store: Store | None = None,
    **options: Any,
) -> AppEngine:
    caps = book.capabilities()
    names = {c.name: c.operation for c in caps}
    sources = options.pop("sources", {})
    parsed = [parse_manifest(t, capabilities=names, sources=sources) for t in manifests]
    return AppEngine(
        model=hooks.model(),
        capabilities=caps,
        store=store or MemoryStore(),
        tables=options.pop("tables", None) or MemoryAppTables(),
        principal="alice",
        manifests=parsed,
        authorize=allow_all,
        clock=clock,
        sources=sources,
        guards=[],
        **options,
    )


async def card(eng: AppEngine, approval: ApprovalRecord) -> PendingAction:
    """The pending action a person is shown for an approval."""
    for event in await eng.store.read_events(approval.run_id):
        if isinstance(event, PendingAction) and event.approval_id == approval.approval_id:
            return event
    raise AssertionError("no card")
