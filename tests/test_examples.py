"""Every example runs as a user runs it (``python examples/<name>.py``) and does what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")


def run(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=EXAMPLES,
        env=env if env is not None else offline(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def offline() -> dict[str, str]:
    """The environment without a provider's key: the examples must not need one."""
    return {k: v for k, v in os.environ.items() if k not in (*KEYS, "FIDUCIARY_MODEL")}


def succeeded(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


SHOP = """\
> Order A-1001 arrived with a chipped mug: refund 12 dollars.
  refund: {"order_id": "A-1001", "refunded": "12", "to": "ana@example.com"}
Refunded $12 to ana@example.com.
> Order A-1002 never arrived: refund it in full.
  waits for a person (confirm): Refund $180.00 on A-1002 (never arrived)
  approved by support
  refund: {"order_id": "A-1002", "refunded": "180.00", "to": "ben@example.com"}
Refunded $180.00 to ben@example.com.
> Please cancel A-1003, the customer changed their mind.
  cancel_order: {"order_id": "A-1003", "status": "cancelled"}
Order A-1003 is cancelled.
A-1001: shipped, refunded $12
A-1002: shipped, refunded $180.00
A-1003: cancelled, refunded $0
"""


def test_shop_refunds_on_its_own_below_the_threshold_and_asks_above() -> None:
    assert succeeded(run("shop.py")) == SHOP


def test_fastapi_app_approves_a_refund_through_the_mounted_api() -> None:
    lines = succeeded(run("fastapi_app.py")).splitlines()
    assert re.fullmatch(r"API key for 'support': fid_\S+", lines[0])
    assert lines[1:] == [
        "before: {'id': 'A-1002', 'status': 'shipped', 'refunded': '0'}",
        "waiting for a person (confirm): Refund $180.00 on A-1002 (never arrived)",
        "approved: approved",
        "after: {'id': 'A-1002', 'status': 'shipped', 'refunded': '180.00'}",
    ]


NOTEBOOK = """\
completed - Refunded $12 to ana@example.com.
awaiting_approval
Refund $180.00 on A-1002 (never arrived): confirm
completed - Refunded $180.00 to ben@example.com.
{'A-1001': '12', 'A-1002': '180.00', 'A-1003': '0'}
"""

# what Jupyter does: the cells run in a thread whose event loop is running
UNDER_A_RUNNING_LOOP = """
import asyncio, runpy

async def cell():
    asyncio.get_running_loop()
    runpy.run_path("notebook.py", run_name="__main__")

asyncio.run(cell())
"""


def test_notebook_runs_as_a_plain_script() -> None:
    assert succeeded(run("notebook.py")) == NOTEBOOK


def test_notebook_runs_where_an_event_loop_is_already_running() -> None:
    assert succeeded(run("-c", UNDER_A_RUNNING_LOOP)) == NOTEBOOK


def test_real_provider_skips_without_a_key() -> None:
    done = run("real_provider.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "skipped: set ANTHROPIC_API_KEY or OPENAI_API_KEY to run this example on a real model\n"
    )


@pytest.mark.live
@pytest.mark.skipif(not any(os.environ.get(k) for k in KEYS), reason="no provider key is set")
def test_real_provider_refunds_with_a_real_model() -> None:
    done = run("real_provider.py", env=dict(os.environ), stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert "  refund: " in done.stdout
    assert "'A-1002': '0'" not in done.stdout.splitlines()[-1]


SUPPORT_AGENT = """\
> Order B-2001 arrived damaged, what can we do?
  the agent asks: B-2001 (teapot, $42.00) arrived damaged: refund or replace? (refund / replacement)
  the run waits: awaiting_input
  the person answers: refund
  settle_order: {"order_id": "B-2001", "refunded": "42.00"}
Refunded $42.00; the customer is told.
> B-2001 arrived damaged again!
  the agent asks: B-2001 (teapot, $42.00) arrived damaged: refund or replace? (refund / replacement)
  the run waits: awaiting_input
  the person answers: 2
  settle_order: {"order_id": "B-2001", "shipped": "teapot"}
A new teapot is on its way; the customer is told.
B-2001: $42.00 refunded to dee@example.com
B-2001: a new teapot shipped to dee@example.com
"""


def test_support_agent_asks_the_person_and_acts_on_the_answer() -> None:
    assert succeeded(run("support_agent.py")) == SUPPORT_AGENT


TYPED_EXTRACTION = """\
turn answered by secondary (primary overloaded)
turn answered by secondary (primary overloaded)
turn answered by secondary (primary overloaded)
sent back to the model: - total: Input should be a valid decimal
completed INV-2041 Acme Tools 1234.50
  10 x Hammer @ 23.45
  20 x Saw @ 50.00
"""


def test_typed_extraction_corrects_an_invalid_answer_and_returns_an_invoice() -> None:
    assert succeeded(run("typed_extraction.py")) == TYPED_EXTRACTION


def test_the_eval_file_passes_offline_against_the_wallet_agent() -> None:
    import json

    done = run("-m", "fiduciary", "eval", "evals/wallet.yaml", "--json")
    report = json.loads(succeeded(done))
    assert report["model"] == "scripted"
    assert [(c["name"], c["passed"]) for c in report["cases"]][:1] == [
        ("a balance question reads, and writes nothing", True)
    ]
    assert report["total"] == {"cases": 6, "passed": 6, "checks": 25, "checks_passed": 25}
    statuses = [c["status"] for c in report["cases"]]
    assert statuses.count("awaiting_approval") == 2  # the gated writes were held, not run


MANAGER_WORKER = """\
> Please pay my electricity invoice, INV-7.
  the manager's run is awaiting_child: it waits for billing, holding nothing
  billing waits for a person: pay_invoice $120.00
    delegated for: Please pay my electricity invoice, INV-7.
  approved by alice
Billing says: Paid $120.00 for INV-7.
  billing was refused close_account: not_allowed
  billing: look_up_invoice {"invoice_id": "INV-7", "payee": "electricity", "usd": "120.00"}
  billing: pay_invoice {"invoice_id": "INV-7", "paid": "120.00"}
paid: ['INV-7']
"""


def test_manager_worker_delegates_a_payment_that_waits_for_the_person() -> None:
    assert succeeded(run("manager_worker.py")) == MANAGER_WORKER
