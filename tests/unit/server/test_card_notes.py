"""The console's cards, from the HTTP API: the guards' sentences for the person, never the
ones written for the model."""

from __future__ import annotations

import httpx
import pytest

from fiduciary.events import GuardFired, PendingAction
from fiduciary.server import Server

from .conftest import Keys, all_events, bearer, settle, start_run

pytestmark = pytest.mark.timeout(30)

FOR_PERSON = (
    "send cannot be undone, and no preview was shown first: check every detail below before "
    "you approve."
)
FOR_MODEL = "state exactly what will happen before or with this action"


async def test_an_approval_shows_the_guards_sentence_for_the_person(
    client: httpx.AsyncClient, keys: Keys, server: Server
) -> None:
    run_id = await start_run(client, keys.alice, "send 60")  # irreversible, no preview shown
    await settle(server)
    response = await client.get(f"/approvals?run_id={run_id}", headers=bearer(keys.alice))
    assert response.status_code == 200, response.text
    (card,) = response.json()["approvals"]
    assert card["guard_notes"] == [
        {"guard": "irreversibility", "verdict": "hint", "message": FOR_PERSON}
    ]
    one = await client.get(f"/approvals/{card['approval_id']}", headers=bearer(keys.alice))
    assert one.json()["guard_notes"] == card["guard_notes"]
    for body in (response.text, one.text):
        assert FOR_MODEL not in body

    # the log keeps both: the model's sentence goes to the model with the result
    events = await all_events(client, keys.alice, run_id)
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    (note,) = pending.guard_notes
    assert FOR_MODEL in note.message
    assert note.for_person == FOR_PERSON
    (fired,) = [e for e in events if isinstance(e, GuardFired)]  # the console's run view
    assert (fired.guard, fired.for_person, fired.shown) == (
        "irreversibility",
        FOR_PERSON,
        FOR_PERSON,
    )
