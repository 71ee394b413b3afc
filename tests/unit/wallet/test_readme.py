"""The README's paper-wallet section stays true: its example runs, its table lists every
capability as declared."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from uuid import uuid4

from fiduciary import CallContext, ManualClock, Principal
from fiduciary.capabilities import Capability
from fiduciary.wallet import PaperWallet, wallet_capabilities
from fiduciary.wallet.invoicing import payment_capabilities
from fiduciary.wallet.machine_payments import pay_api_capabilities

README = Path(__file__).resolve().parents[3] / "README.md"


def section() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"## The paper wallet\n(.*?)\n## ", text, re.S)
    assert match is not None
    return match.group(1)


def test_the_table_lists_every_capability_as_declared(wallet: PaperWallet) -> None:
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ?(?:`(\w+)`)? ?\|", section(), re.M)
    # build_wallet_agent's, then pay_api_capabilities' (the table says they are not in it)
    offered = [
        *wallet_capabilities(wallet),
        *payment_capabilities(wallet),
        *pay_api_capabilities(wallet),
    ]
    declared = {c.name: c for c in offered}
    assert [name for name, _, _ in rows] == list(declared)
    for name, kind, operation in rows:
        assert declared[name].kind.value == kind, name
        assert (declared[name].operation or "") == operation, name


async def test_the_real_backend_example_runs_and_pays_once() -> None:
    blocks = re.findall(r"```python\n(.*?)```", section(), re.S)
    namespace: dict[str, object] = {}
    exec(compile(blocks[-1], "README.md", "exec"), namespace)
    cap = namespace["bank_transfer"]
    assert isinstance(cap, Capability)
    assert (cap.kind.value, cap.operation, cap.replay.value) == ("execute", "send", "never")
    args = cap.input_model.model_validate({"iban": "DE89370400440532013000", "amount": "42.50"})
    ctx = CallContext(
        run_id=uuid4(),
        principal=Principal("ann"),
        tool_use_id="t1",
        capability=cap.name,
        idempotency_key="run:t1:bank_transfer",
        clock=ManualClock(),
    )
    first = await cap.invoke(args, ctx)
    again = await cap.invoke(args, ctx)
    assert first == again == {"reference": "PAY-0001", "paid": "42.50"}
    assert await cap.amount(args, ctx) == Decimal("42.50")
