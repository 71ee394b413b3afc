"""The wallet's sample apps, on the paper wallet, each answered by the scripted model.

- ``dca``: buys a fixed amount of an asset each period (batch intents, one approval per batch);
- ``sweeper``: moves idle USDC above a threshold to savings within a scoped grant;
- ``guardian``: on a falling health factor, proposes a repayment (a per-action intent).

``sample_engine`` assembles an ``AppEngine`` over a ``PaperWallet``: the wallet's capabilities,
sources read from the wallet, and ``sample_model``, which answers each app's hooks from the tick
context alone (deterministic, so a tick resumed in another process gets the same answer).
``paper_engine`` is it as an apps factory (``--apps-engine``): the default of ``fiduciary
serve --apps``, ``fiduciary worker --apps`` and ``fiduciary apps``, which name it at the entry
points (``fiduciary.apps`` knows no wallet).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

from ...apps.engine import AppEngine, Source
from ...apps.manifest import Manifest, load_manifests
from ...apps.served import ServedApps
from ...apps.tables import AppTables
from ...capabilities import Principal
from ...clock import Clock, SystemClock
from ...exceptions import ConfigurationError
from ...gates import Authorize
from ...guards import Guard
from ...models.scripted import Reply, Results, Script, ScriptedModel
from ...policy import Policy
from ...stores.base import Store
from ..capabilities import wallet_capabilities
from ..demo import own_wallet_only
from ..wallet import PaperWallet

__all__ = [
    "SAMPLES",
    "paper_engine",
    "sample_engine",
    "sample_manifests",
    "sample_model",
    "sample_positions",
]

SAMPLES = Path(__file__).parent


def _context(results: Results) -> dict[str, Any]:
    prompt = results.user_messages[0]
    body = prompt.split("Context:\n", 1)[1].split("\n\nAnswer with", 1)[0]
    value: dict[str, Any] = json.loads(body)
    return value


def _available(balances: dict[str, Any], asset: str) -> Decimal:
    for holding in balances.get("available", []):
        if holding["asset"] == asset:
            return Decimal(str(holding["amount"]))
    return Decimal(0)


def _dca(ctx: dict[str, Any]) -> dict[str, Any]:
    config, state = ctx["config"], ctx["state"]
    amount = Decimal(str(config.get("amount", "10")))
    asset = str(config.get("asset", "SUI"))
    if _available(ctx["sources"]["balances"], "USDC") < amount:
        return {"reply": "not enough USDC this period", "state": state}
    args = {"from_asset": "USDC", "to_asset": asset, "amount": str(amount)}
    intent = {
        "summary": f"buy {amount} USDC of {asset}",
        "action": {"capability": "swap_execute", "args": args},
    }
    bought = int(state.get("purchases", 0)) + 1
    return {"reply": f"buying {asset}", "state": {"purchases": bought}, "intents": [intent]}


def _sweeper(ctx: dict[str, Any]) -> dict[str, Any]:
    config, state = ctx["config"], ctx["state"]
    keep = Decimal(str(config.get("keep", "920")))
    idle = _available(ctx["sources"]["balances"], "USDC") - keep
    if idle <= 0:
        return {"reply": "nothing idle", "state": state}
    if not state.get("granted"):
        limit = str(config.get("grant", "300"))
        grant = {"operations": ["save"], "limits": {"save": limit}, "ttl": 120}
        ask = {"summary": f"sweep idle USDC up to ${limit}", "grant": grant}
        return {"reply": "asking for a grant", "state": {"granted": True}, "intents": [ask]}
    args = {"asset": "USDC", "amount": str(idle)}
    sweep = {
        "summary": f"save {idle} idle USDC",
        "action": {"capability": "save_deposit", "args": args},
    }
    return {"reply": "sweeping", "state": state, "intents": [sweep]}


def _guardian(ctx: dict[str, Any]) -> dict[str, Any]:
    config, state = ctx["config"], ctx["state"]
    factor = ctx["sources"]["health"].get("health_factor")
    floor = Decimal(str(config.get("floor", "2.0")))
    if factor is None or Decimal(str(factor)) >= floor:
        return {"reply": "healthy", "state": state}
    amount = str(config.get("repay", "50"))
    repay = {
        "summary": f"repay {amount} USDC: the health factor is {factor}",
        "permissions": ["repay"],
        "action": {"capability": "repay_debt", "args": {"asset": "USDC", "amount": amount}},
    }
    return {"reply": "repaying", "state": state, "intents": [repay]}


_ANSWERS = {"dca": _dca, "sweeper": _sweeper, "guardian": _guardian}


def sample_model() -> ScriptedModel:
    """The scripted model of the sample apps: tick hooks answered from the context."""

    def reply(results: Results) -> str:
        first = results.user_messages[0]
        app = first[len("[app ") :].split("]", 1)[0]
        if "] hook tick\n" not in first or app not in _ANSWERS:
            return "{}"
        return json.dumps(_ANSWERS[app](_context(results)))

    return ScriptedModel([Script(match="[app ", steps=[Reply(reply)])], name="scripted")


def sample_sources(wallet: PaperWallet, principal: str, clock: Clock) -> dict[str, Source]:
    async def balances() -> Any:
        return wallet.balances(principal, at=clock.now()).model_dump(mode="json")

    async def health() -> Any:
        report = wallet.health(principal, clock.now()).model_dump(mode="json")
        report.pop("as_of", None)
        return report

    async def period() -> Any:
        return clock.now().date().isoformat()

    return {"balances": balances, "health": health, "period": period}


def sample_positions(wallet: PaperWallet, principal: str, clock: Clock) -> Source:
    """The principal's positions in the wallet's lending market (savings and debt, to the cent:
    interest accrued between two ticks does not make every tick's context new)."""

    async def positions() -> Any:
        held = wallet.positions(principal, clock.now())
        cent = Decimal("0.01")
        return [
            {"kind": kind, "asset": asset, "amount": str(amount.quantize(cent))}
            for kind, amounts in (("savings", held.savings), ("debt", held.debt))
            for asset, amount in sorted(amounts.items())
            if amount > 0
        ]

    return positions


def sample_manifests(wallet: PaperWallet) -> list[Manifest]:
    caps = wallet_capabilities(wallet)
    return load_manifests(
        SAMPLES,
        capabilities={c.name: c.operation for c in caps},
        sources=("balances", "health", "period"),
    )


def sample_engine(
    wallet: PaperWallet,
    *,
    store: Store,
    principal: Principal | str,
    clock: Clock,
    authorize: Authorize,
    tables: AppTables | None = None,
    guards: Iterable[Guard] | None = None,
    policy: Policy | None = None,
) -> AppEngine:
    """An engine running the sample apps over ``wallet``, with the scripted model."""
    who = principal if isinstance(principal, str) else principal.actor_id
    return AppEngine(
        model=sample_model(),
        capabilities=wallet_capabilities(wallet),
        store=store,
        principal=principal,
        manifests=sample_manifests(wallet),
        tables=tables,
        policy=policy,
        guards=None if guards is None else list(guards),
        authorize=authorize,
        clock=clock,
        sources=sample_sources(wallet, who, clock),
        positions=sample_positions(wallet, who, clock),
    )


def paper_engine(store: Store, tables: AppTables, principal: str) -> ServedApps:
    """The sample apps' engine over the paper wallet kept in the runs' SQLite file (an apps
    factory: ``fiduciary.wallet.apps:paper_engine``)."""
    from ...stores.memory import MemoryStore
    from ...stores.sqlite import SQLiteStore

    if not isinstance(store, SQLiteStore | MemoryStore):
        raise ConfigurationError(
            "the sample apps run on the paper wallet, kept in the runs' SQLite file: with "
            f"{type(store).__name__}, name your own apps factory (--apps-engine module:attribute)"
        )
    wallet = PaperWallet(getattr(store, "path", ":memory:"))
    engine = sample_engine(
        wallet,
        store=store,
        principal=principal,
        clock=SystemClock(),
        authorize=own_wallet_only,
        tables=tables,
    )
    return ServedApps(engine, [wallet.close])
