"""Keys stay with the Signer: a v3 keystore decrypted with a passphrase from a file or the
environment; neither the private key nor the passphrase (nor a mnemonic) reaches an error, an
event, an audit row, a model request or a log line (the redaction canary, for chain secrets)."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

import pytest

from fiduciary import Agent, Redactor, capability, encode_event
from fiduciary.chain.errors import ChainError
from fiduciary.chain.keys import load_keystore, write_keystore
from fiduciary.exceptions import ConfigurationError
from fiduciary.stores.memory import MemoryStore
from fiduciary.testing import (
    Call,
    ManualClock,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)

PASSPHRASE = "CANARY-keystore-passphrase-7731"
MNEMONIC = "canary abandon ability able about above absent absorb abstract absurd abuse access"


@pytest.fixture
def key() -> bytes:
    return secrets.token_bytes(32)


@pytest.fixture
def keystore(tmp_path: Path, key: bytes) -> Path:
    path = tmp_path / "key.json"
    write_keystore(path, key, PASSPHRASE, iterations=2)
    return path


def test_a_keystore_opens_with_its_passphrase_from_the_environment_or_a_file(
    keystore: Path, tmp_path: Path, key: bytes
) -> None:
    by_env = load_keystore(keystore, env={"FIDUCIARY_KEYSTORE_PASSPHRASE": PASSPHRASE})
    file = tmp_path / "pass"
    file.write_text(PASSPHRASE + "\n")
    by_file = load_keystore(keystore, passphrase_file=file, env={})
    assert by_env.address == by_file.address
    assert key.hex() in by_env.secrets()
    assert "0x" + key.hex() in by_env.secrets()
    assert PASSPHRASE in by_env.secrets()
    for shown in (repr(by_env), str(by_env)):
        assert key.hex() not in shown
        assert PASSPHRASE not in shown
    assert oct(keystore.stat().st_mode & 0o777) == "0o600"


def test_a_wrong_or_missing_passphrase_is_a_clear_error_that_does_not_repeat_it(
    keystore: Path,
) -> None:
    wrong = "CANARY-wrong-passphrase"
    with pytest.raises(ConfigurationError) as caught:
        load_keystore(keystore, env={"FIDUCIARY_KEYSTORE_PASSPHRASE": wrong})
    assert str(caught.value) == (
        f"cannot decrypt the keystore at {keystore}: wrong passphrase or damaged file"
    )
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    with pytest.raises(ConfigurationError, match="no keystore passphrase: set FIDUCIARY_"):
        load_keystore(keystore, env={})


async def test_chain_secrets_reach_no_event_audit_row_model_request_or_log(
    caplog: pytest.LogCaptureFixture, keystore: Path, key: bytes
) -> None:
    caplog.set_level(logging.DEBUG)
    store, clock = MemoryStore(), ManualClock()
    signer = load_keystore(keystore, env={"FIDUCIARY_KEYSTORE_PASSPHRASE": PASSPHRASE})
    canaries = (key.hex(), "0x" + key.hex(), PASSPHRASE, MNEMONIC)

    @capability(kind="read")
    async def node_status() -> dict[str, Any]:
        """A careless node client that echoes its configuration."""
        return {
            "node": "ok",
            "signer": f"loaded key 0x{key.hex()} with {PASSPHRASE}",
            "wallet": {"mnemonic": MNEMONIC},
        }

    @capability(kind="execute", tier="auto")
    async def broadcast(note: str) -> dict[str, str]:
        """A write whose backend refuses with its key in the message."""
        raise ChainError("refused_by_node", f"bad signature from key {key.hex()} ({PASSPHRASE})")

    script = Script(
        "status",
        [
            ToolCalls([Call("node_status")]),
            ToolCalls([Call("broadcast", lambda r: {"note": r["node_status"]["signer"]})]),
            Reply("done"),
        ],
    )
    model = ScriptedModel([script])
    agent = Agent(
        model=model,
        capabilities=[node_status, broadcast],
        store=store,
        clock=clock,
        authorize=allow_all,
        redactor=Redactor(known_secrets=signer.secrets()),
    )
    events = await collect(agent.run(f"status please, mnemonic: {MNEMONIC}", principal="alice"))
    run_id = events[0].run_id
    stored = "\n".join(encode_event(e) for e in await store.read_events(run_id))
    audit = "\n".join(repr(a) for a in await store.audit_records(run_id))
    requests = "\n".join(repr(r) for r in model.requests)
    assert "loaded key" in stored  # the rest of the data still flows
    assert len(model.requests) == 3
    for canary in canaries:
        assert canary not in stored, canary
        assert canary not in audit, canary
        assert canary not in requests, canary
        assert canary not in caplog.text, canary
