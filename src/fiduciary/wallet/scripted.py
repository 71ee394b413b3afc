"""The wallet's offline model: it does what the person's message asks, and nothing else.

``WalletScriptedModel`` reads the latest message of the run and answers it with the wallet's
tools: a balance or rates question is read and summarised; "put 20 USDC into savings", "send 75
USDC to 0x…", "swap 15 USDC for SUI (at most 1% slippage)" are done (after reading the balance),
each when asked and only then. A message it does not understand gets what it can do: it never
writes on its own (a balance question once made it save 20 USDC, the demo's next step).

While a run follows ``DEMO_CONVERSATION`` word for word, it plays the demo's script for each
message (the demo's "Dave" step tries an address from memory, to show the guard refusing it).
Like every scripted model, its next step comes from the transcript alone, so a run resumed in a
new process goes on where it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from ..models.base import ModelEvent, ModelRequest, UserTextMessage
from ..models.scripted import Call, Reply, Results, Script, ScriptedModel, Step, ToolCalls
from .assets import ASSETS, get_asset
from .errors import WalletError

__all__ = [
    "CAN_DO",
    "DAVE_GUESS",
    "DEMO_CONVERSATION",
    "DEMO_PRINCIPAL",
    "LANDLORD",
    "WalletScriptedModel",
    "demo_steps",
    "plan",
]

DEMO_PRINCIPAL = "demo-user"
LANDLORD = "0x7a3b9c2d4e5f60718293a4b5c6d7e8f901a2b3c4"
DAVE_GUESS = "0x9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"  # the model "remembers" it
DEMO_CONVERSATION: tuple[str, ...] = (
    "What's my balance, and what do savings pay right now? Put 20 USDC into savings.",
    f"Please send 75 USDC to my landlord at {LANDLORD} for the rent.",
    "Also send 30 USDC to Dave for the concert tickets.",
    "Finally, swap 15 USDC for SUI, with at most 1% slippage.",
)


def _receipt_line(receipt: Mapping[str, Any]) -> str:
    return f"{receipt.get('label', '?')} (digest {str(receipt.get('digest', '?'))[:10]}…)"


def amount_text(value: Any, asset: str) -> str:
    """An amount from a tool result, as a person writes it (20.00 USDC, 3.32 SUI)."""
    try:
        return get_asset(asset).format(Decimal(str(value)))
    except (ArithmeticError, ValueError, WalletError):
        return str(value)


def _available(results: Results, asset: str) -> str:
    report = results.get("balance_check") or {}
    for holding in report.get("available", []):
        if holding.get("asset") == asset:
            return amount_text(holding["amount"], asset)
    return "0"


def _error(results: Results, name: str) -> tuple[str, str] | None:
    """The code and message of the latest call to ``name`` if it failed."""
    text = results.errors.get(name)
    if text is None:
        return None
    try:
        body = json.loads(text.split("\n\n", 1)[0])
    except ValueError:
        return "error", text
    if not isinstance(body, dict):
        return "error", text
    return str(body.get("error", "error")), str(body.get("message", text))


def after_save(results: Results) -> str:
    rates = {r["asset"]: r for r in results.get("rates_info") or []}
    usdc = rates.get("USDC", {})
    lines = [
        f"You had {_available(results, 'USDC')} USDC available. USDC savings pay "
        f"{usdc.get('supply_apy_pct', '?')}% APY, plus about {usdc.get('reward_apr_pct', '?')}% "
        "in SUI rewards."
    ]
    failed = _error(results, "save_deposit")
    if failed is not None:
        lines.append(f"I could not save: {failed[1]}")
    else:
        receipt = results["save_deposit"]
        books = {b["book"]: b["amount"] for b in receipt["balances"]}
        lines.append(
            f"Done: {_receipt_line(receipt)}. Savings now hold "
            f"{amount_text(books.get('savings'), 'USDC')} USDC and "
            f"{amount_text(books.get('available'), 'USDC')} USDC stays available."
        )
    return "\n".join(lines)


def after_send(results: Results) -> str:
    failed = _error(results, "send_transfer")
    if failed is not None and failed[0] == "denied":
        return "You declined the transfer, so nothing was sent."
    if failed is not None:
        return f"Nothing was sent: {failed[1]}"
    receipt = results["send_transfer"]
    left = next((b["amount"] for b in receipt["balances"] if b["book"] == "available"), "?")
    return f"{_receipt_line(receipt)}. You have {amount_text(left, 'USDC')} USDC available now."


def after_refusal(results: Results) -> str:
    failed = _error(results, "send_transfer")
    if failed is not None and "address_source" in failed[1]:
        return (
            "I did not send anything to Dave: I have no address for him that you gave me, and "
            "he is not a saved contact. Paste his address (and I can save him as a contact), "
            "then I will prepare the transfer."
        )
    return "Nothing was sent to Dave: " + (failed[1] if failed else "it was not attempted.")


def after_swap(results: Results) -> str:
    failed = _error(results, "swap_execute")
    if failed is not None:
        return f"No swap was made: {failed[1]}"
    receipt = results["swap_execute"]
    d = receipt["details"]
    return (
        f"{_receipt_line(receipt)}: 1 {d['from_asset']} = {d['rate']} {d['to_asset']}, "
        f"${d['fee_usd']} in pool fees, {d['price_impact_pct']}% price impact, and no less "
        f"than {amount_text(d['min_out'], d['to_asset'])} {d['to_asset']} was accepted "
        "(your 1% limit)."
    )


def demo_steps() -> list[list[Step]]:
    """The scripted model's side of ``DEMO_CONVERSATION``: the steps that answer each message."""

    def quote_id(results: Results) -> dict[str, Any]:
        quote = results.get("swap_quote") or {}
        return {
            "from_asset": "USDC",
            "to_asset": "SUI",
            "amount": "15",
            "max_slippage_pct": "1",
            "quote_id": quote.get("quote_id"),
        }

    return [
        [
            ToolCalls(
                [Call("balance_check"), Call("rates_info")],
                text="Let me look at your balance and today's rates.",
            ),
            ToolCalls(
                [Call("save_deposit", {"asset": "USDC", "amount": "20"})],
                text="Saving 20 USDC now.",
            ),
            Reply(after_save),
        ],
        [
            ToolCalls(
                [
                    Call("balance_check"),
                    Call(
                        "send_transfer",
                        {"to": LANDLORD, "asset": "USDC", "amount": "75", "memo": "rent"},
                    ),
                ],
                text="Checking your balance, and preparing the transfer for your approval.",
            ),
            Reply(after_send),
        ],
        [
            ToolCalls(
                [Call("send_transfer", {"to": DAVE_GUESS, "asset": "USDC", "amount": "30"})],
                text="Sending 30 USDC to Dave.",
            ),
            Reply(after_refusal),
        ],
        [
            ToolCalls(
                [
                    Call("balance_check"),
                    Call("swap_quote", {"from_asset": "USDC", "to_asset": "SUI", "amount": "15"}),
                ],
                text="Let me check your balance and get a quote.",
            ),
            ToolCalls([Call("swap_execute", quote_id)], text="The quote is good; swapping."),
            Reply(after_swap),
        ],
    ]


CAN_DO = (
    "I am the offline scripted model, so I only understand a few plain requests: "
    '"What\'s my balance?", "What do savings pay?", "Put 20 USDC into savings", '
    '"Send 75 USDC to 0x…" (an address you give), "Swap 15 USDC for SUI with at most 1% '
    'slippage". Set ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY, or pass --model, to '
    "talk to a real model."
)

_NUMBER = r"(\d+(?:\.\d+)?)"
_ASSET = r"([a-z]{2,5})\b"
_SAVE = re.compile(rf"\b(?:save|put|deposit)\s+{_NUMBER}\s*{_ASSET}")
_SEND = re.compile(rf"\b(?:send|pay|transfer)\s+{_NUMBER}\s*{_ASSET}")
_SWAP = re.compile(
    rf"\b(?:swap|exchange|convert)\s+{_NUMBER}\s*{_ASSET}\s+(?:for|to|into)\s+{_ASSET}"
)
_SLIPPAGE = re.compile(rf"{_NUMBER}\s*%")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}\b")
_BALANCE = re.compile(r"\bbalances?\b|\bhow much\b|\bwhat do i (?:have|own)\b|\bholdings\b")
_RATES = re.compile(r"\brates?\b|\bapy\b|\binterest\b|\bsavings pay\b|\byields?\b")


def _asset(word: str) -> str | None:
    symbol = word.upper()
    return symbol if symbol in ASSETS else None


def _summary(
    asked_balance: bool, asked_rates: bool, writes: Sequence[str], refusals: Sequence[str]
) -> Reply:
    def text(results: Results) -> str:
        lines: list[str] = list(refusals)
        report = results.get("balance_check")
        if asked_balance and isinstance(report, dict):
            held = [
                f"{amount_text(h.get('amount'), str(h.get('asset')))} {h.get('asset')}"
                for h in report.get("available", [])
            ]
            lines.append(
                f"Available: {', '.join(held) or 'nothing'} (total ${report.get('total_usd')})."
            )
        rates = results.get("rates_info")
        if asked_rates and isinstance(rates, list):
            lines.append(
                "Savings pay "
                + ", ".join(f"{r.get('supply_apy_pct')}% APY on {r.get('asset')}" for r in rates)
                + "."
            )
        for name in writes:
            lines.append(_WRITTEN[name](results))
        return "\n".join(lines) or CAN_DO

    return Reply(text)


def _saved(results: Results) -> str:
    return after_save(results).split("\n", 1)[-1]  # without the rates line it adds


_WRITTEN: dict[str, Callable[[Results], str]] = {
    "save_deposit": _saved,
    "send_transfer": after_send,
    "swap_execute": after_swap,
}


def plan(message: str) -> list[Step]:
    """The steps that answer ``message``: reads, then the writes it asks for, then a reply."""
    text = message.lower()
    reads: list[Call] = []
    writes: list[Call] = []
    refusals: list[str] = []
    if (save := _SAVE.search(text)) and (asset := _asset(save[2])):
        writes.append(Call("save_deposit", {"asset": asset, "amount": save[1]}))
    if (send := _SEND.search(text)) and (asset := _asset(send[2])):
        address = _ADDRESS.search(message)
        if address is None:
            refusals.append(
                "I send only to an address you give me in this conversation or a saved "
                "contact: paste the address and I will prepare the transfer."
            )
        else:
            memo = "rent" if "rent" in text else ""
            args = {"to": address[0], "asset": asset, "amount": send[1], "memo": memo}
            writes.append(Call("send_transfer", args))
    if (swap := _SWAP.search(text)) and (sold := _asset(swap[2])) and (bought := _asset(swap[3])):
        slippage = _SLIPPAGE.search(text)
        quote = {"from_asset": sold, "to_asset": bought, "amount": swap[1]}
        reads.append(Call("swap_quote", quote))

        def execute(results: Results, quote: dict[str, Any] = quote) -> dict[str, Any]:
            quoted = results.get("swap_quote") or {}
            limit = {"max_slippage_pct": slippage[1]} if slippage else {}
            return {**quote, **limit, "quote_id": quoted.get("quote_id")}

        writes.append(Call("swap_execute", execute))
    asked_balance = bool(_BALANCE.search(text))
    asked_rates = bool(_RATES.search(text))
    if asked_rates:
        reads.insert(0, Call("rates_info"))
    if asked_balance or writes:  # the balance is read before anything that spends
        reads.insert(0, Call("balance_check"))
    if not (reads or writes):
        return [Reply(" ".join(refusals) or CAN_DO)]
    steps: list[Step] = [ToolCalls(reads, text="Let me look.")] if reads else []
    if writes:
        steps.append(ToolCalls(writes, text="Doing what you asked."))
    steps.append(_summary(asked_balance, asked_rates, [c.name for c in writes], refusals))
    return steps


class WalletScriptedModel:
    """The wallet's scripted model (named ``scripted``): see the module's docstring."""

    def __init__(self, *, name: str = "scripted") -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        said = [i for i, m in enumerate(request.messages) if isinstance(m, UserTextMessage)]
        if not said:
            return ScriptedModel([], name=self._name, fallback=CAN_DO).stream(request)
        texts = [m.text for m in request.messages if isinstance(m, UserTextMessage)]
        latest = texts[-1]
        on_script = len(texts) <= len(DEMO_CONVERSATION) and all(
            t == DEMO_CONVERSATION[i] for i, t in enumerate(texts)
        )
        steps = demo_steps()[len(texts) - 1] if on_script else plan(latest)
        # only this message's part of the transcript: its step and its tool results
        since = replace(request, messages=tuple(request.messages[said[-1] :]))
        script = Script(match=lambda _: True, steps=steps, name="paper-wallet")
        return ScriptedModel([script], name=self._name, fallback=CAN_DO).stream(since)
