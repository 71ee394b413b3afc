"""pay_api SIGKILLed after the authorization was signed and sent, before the API answered, then
resumed in a new process: counted on chain, exactly one Transfer whether the API settled the
first authorization (the resumed call signs nothing: the nonce is used) or never did (the
resumed call signs again, with the same nonce, and that one settles)."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from typing import Any
from uuid import uuid4

import pytest

from tests.waiting import wait_for

from .anvil import ROOT
from .conftest import ChainSetup
from .onchain import authorizations_used, token_balance, transfers
from .x402_api import PaidApi, serving

pytestmark = pytest.mark.slow


def _buyer(mode: str, chain: ChainSetup, run_id: str, api: PaidApi) -> list[str]:
    return [sys.executable, "-m", "tests.chain.api_buyer", mode, str(chain.config_path),
            str(chain.keystore), str(chain.passphrase_file), str(chain.db), run_id,
            api.url + "/forecast", api.pay_to]  # fmt: skip


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    result: dict[str, Any] = json.loads(line)
    return result


@pytest.mark.parametrize("settled", [True, False], ids=["api-settled", "api-never-settled"])
def test_a_buyer_killed_after_signing_pays_once_when_resumed(
    chain: ChainSetup, settled: bool
) -> None:
    run_id = str(uuid4())
    owner = chain.signer().address
    with serving(chain.url, chain.config.token) as api:
        api.hold.set()
        api.fail_held = not settled
        start = subprocess.Popen(
            _buyer("start", chain, run_id, api), cwd=ROOT, stdout=subprocess.DEVNULL
        )
        try:
            # the authorization was signed, sent and verified; the answer is held
            wait_for(lambda: api.payments_seen == 1, what="the buyer's payment to arrive")
        finally:
            start.kill()  # SIGKILL
            start.wait(timeout=30)
        assert start.returncode == -9
        api.release.set()
        if settled:
            wait_for(
                lambda: len(transfers(chain.url, chain.config.token, owner, to=api.pay_to)) == 1,
                what="the API's facilitator to settle the held payment",
            )
        else:
            wait_for(lambda: api.payments_seen == 1 and api.served == 0, what="the held failure")
        resumed = subprocess.run(
            _buyer("resume", chain, run_id, api), cwd=ROOT, capture_output=True, text=True,
            timeout=180,
        )  # fmt: skip
        result = _result(resumed)
        assert result["status"] == "completed"
        (end,) = result["ends"]
        assert not end["is_error"], end
        answer = json.JSONDecoder().raw_decode(end["output"])[0]
        (moved,) = transfers(chain.url, chain.config.token, owner, to=api.pay_to)
        assert len(authorizations_used(chain.url, chain.config.token, owner)) == 1
        assert token_balance(chain.url, chain.config.token, api.pay_to) == Decimal(2)
        if settled:  # the nonce is used: nothing signed, the answer names the settlement
            assert answer["paid"]["replayed"] is True
            assert answer["paid"]["transaction"] == moved["transactionHash"]
            assert api.payments_seen == 1
        else:  # signed again, the same nonce: that one settled, and the API answered
            assert answer["status"] == 200
            assert answer["paid"]["replayed"] is False
            assert answer["settlement"]["transaction"] == moved["transactionHash"]
            assert api.payments_seen == 2
