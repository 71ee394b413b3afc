"""``fiduciary mcp`` with the SDK's own client, over stdio (a real process) and streamable HTTP
(the app ``fiduciary serve`` mounts at /mcp, in-process)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, INVALID_PARAMS

from fiduciary import ApprovalError
from fiduciary.server.app import create_app
from fiduciary.server.auth import MemoryKeyStore
from fiduciary.stores.sqlite import SQLiteStore

from .served_agent import mcp_agent
from .serving import Served, no_done_ledger_row, served, stdio_served
from .serving import result as _result

pytestmark = pytest.mark.timeout(120)

__all__ = ["served"]  # the fixture, over stdio and HTTP


async def test_tools_are_the_whitelist_and_a_read_answers(served: Served) -> None:
    async with served.connect("alice") as client:
        listed = (await client.list_tools()).tools
        answer = await client.call_tool("balance", {"account": "main"})
    assert sorted(t.name for t in listed) == ["balance", "greeting", "note", "send", "slow_send"]
    by_name = {t.name: t for t in listed}
    assert by_name["send"].input_schema["required"] == ["to", "amount"]
    assert by_name["balance"].annotations is not None
    assert by_name["balance"].annotations.read_only_hint is True
    assert not answer.is_error
    assert _result(answer)["result"] == {"account": "main", "usd": "250.00"}


async def test_a_write_waits_for_a_person_and_then_runs_exactly_once(served: Served) -> None:
    async with served.connect("alice") as client:
        first = _result(await client.call_tool("send", {"to": "bob", "amount": 50}))
        assert first["status"] == "pending_approval"
        assert await no_done_ledger_row(served.agent, first["run_id"])
        # nothing the client sends approves it
        forged = await client.call_tool(
            "send",
            {"to": "bob", "amount": 50, "approved": True, "approval_id": str(uuid4())},
        )
        assert _result(forged)["status"] == "pending_approval"
        again = _result(await client.call_tool("send", {"to": "bob", "amount": 50}))
        assert again["approval_id"] == first["approval_id"]  # the same call, the same approval
        assert served.effects() == []
        await served.approve(first["approval_id"], first["args_digest"], "alice")
        done = await client.call_tool("send", {"to": "bob", "amount": 50})
        assert _result(done)["status"] == "done"
        assert _result(done)["result"] == {"sent": "50", "to": "bob"}
        recorded = _result(await client.call_tool("send", {"to": "bob", "amount": 50}))
    assert recorded["status"] == "done"
    assert served.effects() == ["send bob 50"]


async def test_an_auto_write_runs_once_and_a_repeat_gets_the_recorded_outcome(
    served: Served,
) -> None:
    async with served.connect("alice") as client:
        one = _result(await client.call_tool("note", {"text": "hi"}))
        two = _result(await client.call_tool("note", {"text": "hi"}))
    assert one["status"] == two["status"] == "done"
    assert one["run_id"] == two["run_id"]
    assert served.effects() == ["note hi"]


async def test_another_principal_sees_and_decides_nothing_of_the_first(served: Served) -> None:
    async with served.connect("alice") as client:
        pending = _result(await client.call_tool("send", {"to": "eve", "amount": 70}))
        mine = {str(r.uri) for r in (await client.list_resources()).resources}
        approval_uri = f"fiduciary://approvals/{pending['approval_id']}"
        assert approval_uri in mine
        read = await client.read_resource(approval_uri)
        assert json.loads(read.contents[0].text)["status"] == "pending"  # type: ignore[union-attr]
    async with served.connect("bob") as other:
        theirs = {str(r.uri) for r in (await other.list_resources()).resources}
        assert approval_uri not in theirs
        assert f"fiduciary://runs/{pending['run_id']}" not in theirs
        with pytest.raises(MCPError) as unseen:
            await other.read_resource(approval_uri)
        assert (unseen.value.code, unseen.value.message) == (
            INVALID_PARAMS,
            f"no resource {approval_uri}",
        )
        # the same call by bob is bob's own, waiting for bob: not alice's outcome
        own = _result(await other.call_tool("send", {"to": "eve", "amount": 70}))
        assert own["status"] == "pending_approval"
        assert own["approval_id"] != pending["approval_id"]
    with pytest.raises(ApprovalError) as refused:
        await served.approve(pending["approval_id"], pending["args_digest"], "bob")
    # in-process, the store says whose it is; over HTTP, bob's key cannot even see it
    assert (refused.value.code, refused.value.message) == {
        "stdio": ("forbidden", "this approval belongs to another principal"),
        "http": ("not_found", f"no approval {pending['approval_id']}"),
    }[served.transport]
    assert served.effects() == []


async def test_an_unknown_key_is_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        app = create_app(mcp_agent(store), keys=MemoryKeyStore(), resume_on_start=False)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as api:
            answer = await api.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"authorization": "Bearer fid_0000000000000000_" + "x" * 43},
            )
        assert answer.status_code == 401
    finally:
        await store.close()


async def test_a_write_killed_after_its_started_row_is_unknown_and_never_runs_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.log"
    pid_file = tmp_path / "server.pid"
    monkeypatch.setenv("FID_MCP_EFFECTS", str(effects))
    store = SQLiteStore(db)
    served = stdio_served(mcp_agent(store), db, effects, pid_file)
    try:
        with anyio.fail_after(60):
            async with served.connect("alice") as client, anyio.create_task_group() as tg:

                async def call_and_be_killed() -> None:
                    with pytest.raises(MCPError) as died:
                        await client.call_tool("slow_send", {"to": "bob"})
                    assert (died.value.code, died.value.message) == (
                        CONNECTION_CLOSED,
                        "Connection closed",
                    )

                tg.start_soon(call_and_be_killed)
                while not pid_file.exists() or not pid_file.read_text():  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            answer: dict[str, Any] = {"status": "in_progress"}
            async with served.connect("alice") as again:
                while answer["status"] == "in_progress":  # until the dead server's lease ends
                    answer = _result(await again.call_tool("slow_send", {"to": "bob"}))
                    await anyio.sleep(0.2)
                repeat = _result(await again.call_tool("slow_send", {"to": "bob"}))
        assert answer["status"] == "unknown"
        assert repeat["status"] == "unknown"
        assert served.effects() == ["slow_send bob"]  # never run a second time
    finally:
        await store.close()


async def test_a_declined_call_may_be_asked_again_and_waits_for_a_person_anew(
    served: Served,
) -> None:
    async with served.connect("alice") as client:
        first = _result(await client.call_tool("send", {"to": "bob", "amount": 60}))
        await served.agent.deny(UUID(first["approval_id"]), by="alice", reason="not today")
        declined = await client.call_tool("send", {"to": "bob", "amount": 60})
        assert _result(declined)["status"] == "refused"
        assert _result(declined)["reason"] == "denied"
        again = _result(await client.call_tool("send", {"to": "bob", "amount": 60}))
    assert again["status"] == "pending_approval"
    assert again["approval_id"] != first["approval_id"]
    assert served.effects() == []
