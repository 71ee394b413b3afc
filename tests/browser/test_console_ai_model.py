"""The console shows the model new runs use (``GET /ai/status``), as an admin last set it, in a
real browser; a long model name is cut with an ellipsis, never past the phone's width."""

from __future__ import annotations

from fiduciary import ManualClock
from fiduciary.server import MemoryKeyStore, create_app
from tests.agent_support import make_agent

from .served_page import PHONE, overflow, signed_in

CHOSEN = "openai-compatible:qwen2.5:7b-instruct-q4_K_M@http://gpu-box.internal.example:11434/v1"


async def test_the_console_shows_the_default_model() -> None:
    keys = MemoryKeyStore()
    alice, _ = await keys.create("alice", ["runs:read", "runs:write", "approvals:decide"])
    app = create_app(make_agent(clock=ManualClock()), keys=keys, resume_on_start=False)
    # an admin's choice, as PUT /ai/default records it
    await app.state.server.models.change(CHOSEN, by="root")
    async with signed_in(app, alice) as shown:
        page = shown.page
        model = page.get_by_test_id("default-model")
        await model.wait_for(state="visible")
        assert await model.text_content() == f"model: {CHOSEN}"
        assert await model.get_attribute("title") == f"The model new runs use: {CHOSEN}"
        await page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
        assert await overflow(page) == []
