"""Webhooks: signed inbound messages (no replays), signed outbound notifications with retries,
and no request ever aimed at a private or loopback address unless allowed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from fiduciary import ManualClock
from fiduciary.events import RunStarted, decode_event
from fiduciary.server import (
    InboundChannel,
    Notifier,
    Server,
    UrlGuard,
    WebhookTarget,
    new_webhook_secret,
    sign,
    standard_signature,
)
from fiduciary.server.webhooks import UnsafeUrlError

from ..conftest import Effects
from .conftest import AppFactory, Keys, all_events, bearer, client_for, problem, settle

pytestmark = pytest.mark.timeout(30)

SECRET = "s3cret-s3cret-s3cret"
CHAT = InboundChannel("chat", SECRET, "alice")


def signed(
    body: bytes, clock: ManualClock, *, secret: str = SECRET, skew: float = 0
) -> dict[str, str]:
    ts = int(clock.now().timestamp() + skew)
    return {
        "content-type": "application/json",
        "x-fiduciary-timestamp": str(ts),
        "x-fiduciary-signature": sign(secret, ts, body),
    }


async def test_a_signed_inbound_message_starts_and_continues_a_run(
    make_app: AppFactory, keys: Keys, clock: ManualClock
) -> None:
    app = make_app(channels=[CHAT])
    server: Server = app.state.server
    async with client_for(app) as client:
        body = json.dumps({"text": "hello from chat"}).encode()
        response = await client.post("/hooks/chat", content=body, headers=signed(body, clock))
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        await settle(server)
        run = (await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
        assert run["principal"] == "alice"
        assert run["status"] == "completed"
        body = json.dumps({"text": "and more", "run_id": run_id}).encode()
        response = await client.post("/hooks/chat", content=body, headers=signed(body, clock))
        assert response.status_code == 202, response.text
        await settle(server)
        events = await all_events(client, keys.alice, run_id)
        assert [e.type for e in events].count("user_message") == 2


async def test_a_signed_message_is_not_the_principal_in_person_its_writes_wait(
    make_app: AppFactory, keys: Keys, clock: ManualClock, effects: Effects
) -> None:
    app = make_app(channels=[CHAT])
    server: Server = app.state.server
    async with client_for(app) as client:
        # $5 of "send" runs on its own for alice in person under the balanced preset
        person = await client.post(
            "/runs", json={"message": "tip five"}, headers=bearer(keys.alice)
        )
        await settle(server)
        run = await client.get(f"/runs/{person.json()['run_id']}", headers=bearer(keys.alice))
        assert run.json()["status"] == "completed"
        assert len(effects.payments) == 1
        body = json.dumps({"text": "tip five"}).encode()
        response = await client.post("/hooks/chat", content=body, headers=signed(body, clock))
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        await settle(server)
        run = (await client.get(f"/runs/{run_id}", headers=bearer(keys.alice))).json()
        assert run["status"] == "awaiting_approval"
        assert len(effects.payments) == 1  # nothing more was sent
        started = (await all_events(client, keys.alice, run_id))[0]
        assert isinstance(started, RunStarted)
        assert started.origin is not None
        assert started.origin.source == "webhook:chat"


async def test_inbound_refusals(make_app: AppFactory, keys: Keys, clock: ManualClock) -> None:
    app = make_app(channels=[CHAT])
    server: Server = app.state.server
    async with client_for(app) as client:
        body = json.dumps({"text": "hello"}).encode()
        problem(
            await client.post("/hooks/nope", content=body, headers=signed(body, clock)),
            404,
            "unknown_channel",
        )
        problem(
            await client.post(
                "/hooks/chat", content=body, headers={"content-type": "application/json"}
            ),
            401,
            "invalid_signature",
        )
        problem(
            await client.post(
                "/hooks/chat",
                content=body,
                headers=signed(body, clock, secret="another-secret-here"),
            ),
            401,
            "invalid_signature",
        )
        tampered = json.dumps({"text": "hello!"}).encode()
        problem(
            await client.post("/hooks/chat", content=tampered, headers=signed(body, clock)),
            401,
            "invalid_signature",
        )
        problem(
            await client.post("/hooks/chat", content=body, headers=signed(body, clock, skew=-301)),
            401,
            "stale_signature",
        )
        problem(
            await client.post("/hooks/chat", content=body, headers=signed(body, clock, skew=+301)),
            401,
            "stale_signature",
        )
        headers = {**signed(body, clock), "x-fiduciary-timestamp": "soon"}
        problem(
            await client.post("/hooks/chat", content=body, headers=headers),
            401,
            "invalid_signature",
        )
        # a valid delivery once; the same delivery again is a replay, even within the window
        headers = signed(body, clock)
        assert (await client.post("/hooks/chat", content=body, headers=headers)).status_code == 202
        clock.advance(60)
        problem(await client.post("/hooks/chat", content=body, headers=headers), 409, "replayed")
        # ... and after the window it is stale
        clock.advance(300)
        problem(
            await client.post("/hooks/chat", content=body, headers=headers), 401, "stale_signature"
        )
        # signed but not a valid message; another principal's run
        bad = b'{"txt": 1}'
        problem(
            await client.post("/hooks/chat", content=bad, headers=signed(bad, clock)),
            422,
            "invalid_request",
        )
        bob_run = await client.post("/runs", json={"message": "hello"}, headers=bearer(keys.bob))
        foreign = json.dumps({"text": "hi", "run_id": bob_run.json()["run_id"]}).encode()
        problem(
            await client.post("/hooks/chat", content=foreign, headers=signed(foreign, clock)),
            404,
            "not_found",
        )
        await settle(server)


# --- outbound -----------------------------------------------------------------------------


class Receiver:
    """A fake receiving server (httpx.MockTransport): records requests, answers from a list."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = statuses or []
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 599:
            raise httpx.ConnectError("refused", request=request)
        headers = {"location": "http://127.0.0.1/admin"} if 300 <= status < 400 else {}
        return httpx.Response(status, headers=headers)


def resolver(answers: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise OSError("no such host")
        return answers[host]

    return resolve


PUBLIC = {"hooks.example.com": ["93.184.216.34"]}


def notifier(
    receiver: Receiver, clock: ManualClock, *, sleeps: list[float] | None = None, **kw: Any
) -> Notifier:
    async def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)

    return Notifier(
        kw.pop("targets", [WebhookTarget("https://hooks.example.com/in?t=1", SECRET)]),
        guard=kw.pop("guard", UrlGuard(resolver=resolver(PUBLIC))),
        clock=clock,
        transport=httpx.MockTransport(receiver),
        sleep=sleep,
        **kw,
    )


async def test_pending_actions_and_run_ends_are_notified_signed(
    make_app: AppFactory, keys: Keys, clock: ManualClock
) -> None:
    receiver = Receiver()
    sender = notifier(receiver, clock)
    app = make_app(notifier=sender)
    server: Server = app.state.server
    async with client_for(app) as client:
        response = await client.post(
            "/runs", json={"message": "Please pay my open bills"}, headers=bearer(keys.alice)
        )
        run_id = response.json()["run_id"]
        await settle(server)
        await sender.wait_idle()
        (request,) = receiver.requests
        body = json.loads(request.content)
        assert body["type"] == "pending_action"
        assert body["run_id"] == run_id
        assert body["principal"] == "alice"
        assert decode_event(json.dumps(body["event"])).type == "pending_action"
        # sent to the checked address, with the name kept for Host and TLS
        assert request.url.host == "93.184.216.34"
        assert request.url.path == "/in"
        assert request.url.query == b"t=1"
        assert request.headers["host"] == "hooks.example.com"
        assert request.extensions["sni_hostname"] == "hooks.example.com"
        # signed the Standard Webhooks way, with the delivery's id
        assert request.headers["webhook-id"] == body["id"]
        ts = int(request.headers["webhook-timestamp"])
        assert ts == int(clock.now().timestamp())
        assert request.headers["webhook-signature"] == standard_signature(
            SECRET, body["id"], ts, request.content
        )
        assert not [name for name in request.headers if name.startswith("x-fiduciary")]
        card = (await client.get("/approvals", headers=bearer(keys.alice))).json()["approvals"][0]
        await client.post(
            f"/approvals/{card['approval_id']}/approve",
            json={"args_digest": card["args_digest"]},
            headers=bearer(keys.alice),
        )
        await settle(server)
        await sender.wait_idle()
        assert [json.loads(r.content)["type"] for r in receiver.requests] == [
            "pending_action",
            "run_completed",
        ]


async def test_retries_with_backoff_then_gives_up(clock: ManualClock) -> None:
    from fiduciary.events import RunCompleted

    event = RunCompleted(run_id=UUID(int=1), seq=9, at=clock.now(), text="ok")
    receiver = Receiver([500, 599, 429, 200])
    sleeps: list[float] = []
    sender = notifier(receiver, clock, sleeps=sleeps)
    sender.notify(event, principal="alice")
    await sender.wait_idle()
    await sender.close()
    (delivery,) = sender.deliveries
    assert delivery.status == "delivered"
    assert delivery.attempts == 4
    assert len(sleeps) == 3
    for i, slept in enumerate(sleeps):  # exponential, with jitter in [0.5, 1) of the step
        assert 0.5 * 2**i <= slept < 2**i
    # a permanent failure stops at once; endless failures stop after max_attempts
    receiver = Receiver([404])
    sender = notifier(receiver, clock, sleeps=[])
    sender.notify(event, principal="alice")
    await sender.wait_idle()
    await sender.close()
    assert sender.deliveries[0].status == "failed"
    assert sender.deliveries[0].attempts == 1
    receiver = Receiver([503] * 10)
    sender = notifier(receiver, clock, sleeps=[], max_attempts=3)
    sender.notify(event, principal="alice")
    await sender.wait_idle()
    await sender.close()
    assert sender.deliveries[0].status == "failed"
    assert len(receiver.requests) == 3
    # other events and other principals' runs are not sent
    target = WebhookTarget(
        "https://hooks.example.com/", SECRET, frozenset({"run_failed"}), frozenset({"bob"})
    )
    receiver = Receiver()
    sender = notifier(receiver, clock, targets=[target])
    sender.notify(event, principal="bob")
    await sender.wait_idle()
    assert receiver.requests == []
    await sender.close()


async def test_redirects_are_not_followed(clock: ManualClock) -> None:
    from fiduciary.events import RunCompleted

    event = RunCompleted(run_id=UUID(int=1), seq=9, at=clock.now(), text="ok")
    receiver = Receiver([302])
    sender = notifier(receiver, clock)
    sender.notify(event, principal="alice")
    await sender.wait_idle()
    assert len(receiver.requests) == 1  # the redirect to 127.0.0.1 was not followed
    assert sender.deliveries[0].status == "failed"
    assert sender.deliveries[0].last_error == "HTTP 302"
    await sender.close()


@pytest.mark.parametrize(
    ("url", "answers", "why"),
    [
        ("http://hooks.example.com/", PUBLIC, "scheme http is not allowed"),
        ("ftp://hooks.example.com/", PUBLIC, "scheme ftp"),
        ("file:///etc/passwd", PUBLIC, "scheme file"),
        ("https://127.0.0.1/", {}, "non-public"),
        ("https://[::1]/", {}, "non-public"),
        ("https://10.0.0.7/", {}, "non-public"),
        ("https://169.254.169.254/latest/meta-data", {}, "non-public"),
        ("https://[::ffff:127.0.0.1]/", {}, "non-public"),
        ("https://[fd00::1]/", {}, "non-public"),
        ("https://0.0.0.0/", {}, "non-public"),
        ("https://100.64.0.1/", {}, "non-public"),
        (
            "https://evil.example.com/",
            {"evil.example.com": ["93.184.216.34", "192.168.1.1"]},
            "non-public",
        ),
        ("https://rebind.example.com/", {"rebind.example.com": ["127.0.0.1"]}, "non-public"),
        ("https://nowhere.example.com/", {}, "does not resolve"),
        ("https://user:pw@hooks.example.com/", PUBLIC, "credentials"),
        ("https:///path", PUBLIC, "no host"),
    ],
)
async def test_ssrf_refusals(url: str, answers: dict[str, list[str]], why: str) -> None:
    guard = UrlGuard(resolver=resolver(answers))
    with pytest.raises(UnsafeUrlError, match=why):
        await guard.check(url)


async def test_private_addresses_only_when_allowed(clock: ManualClock) -> None:
    guard = UrlGuard(schemes=["http", "https"], allow_private=True, resolver=resolver({}))
    checked = await guard.check("http://127.0.0.1:8080/hook")
    assert checked.connect_url == "http://127.0.0.1:8080/hook"
    assert checked.sni_hostname is None
    six = await UrlGuard(resolver=resolver({"v6.example.com": ["2606:2800:220:1::1"]})).check(
        "https://v6.example.com:8443/x"
    )
    assert six.connect_url == "https://[2606:2800:220:1::1]:8443/x"
    assert six.host_header == "v6.example.com:8443"
    # a refused URL is never requested
    receiver = Receiver()
    from fiduciary.events import RunCompleted

    event = RunCompleted(run_id=UUID(int=1), seq=9, at=clock.now(), text="ok")
    sender = notifier(
        receiver, clock, targets=[WebhookTarget("https://127.0.0.1/hook", SECRET)], guard=UrlGuard()
    )
    sender.notify(event, principal="alice")
    await sender.wait_idle()
    assert receiver.requests == []
    assert sender.deliveries[0].status == "refused"
    await sender.close()


async def test_notifications_verify_with_the_standard_webhooks_library() -> None:
    """A receiver verifies a delivery with the ``standardwebhooks`` package, given the target's
    ``whsec_`` secret as is (or, for a plain secret, its bytes); a retry keeps the id."""
    from fiduciary.events import RunCompleted

    clock = ManualClock(datetime.now(UTC))  # the library checks the timestamp against now
    event = RunCompleted(run_id=UUID(int=1), seq=9, at=clock.now(), text="ok")
    secret = new_webhook_secret()
    assert secret.startswith("whsec_")
    targets = [
        WebhookTarget("https://hooks.example.com/a", secret),
        WebhookTarget("https://hooks.example.com/b", SECRET),
    ]
    receiver = Receiver([503])
    sender = notifier(receiver, clock, targets=targets, sleeps=[])
    sender.notify(event, principal="alice")
    await sender.wait_idle()
    await sender.close()
    paths = [r.url.path for r in receiver.requests]
    retried = [r for r in receiver.requests if paths.count(r.url.path) == 2]
    assert len(retried) == 2  # the 503 was retried with the same id, signed anew
    assert retried[0].headers["webhook-id"] == retried[1].headers["webhook-id"]
    for request in receiver.requests:
        key: str | bytes = secret if request.url.path == "/a" else SECRET.encode()
        payload = Webhook(key).verify(request.content, dict(request.headers))
        assert payload["id"] == request.headers["webhook-id"]
        assert payload["type"] == "run_completed"
        with pytest.raises(WebhookVerificationError):
            Webhook(key).verify(
                request.content.replace(b"alice", b"mallory"), dict(request.headers)
            )
        with pytest.raises(WebhookVerificationError):  # the wrong secret
            Webhook(new_webhook_secret()).verify(request.content, dict(request.headers))


def test_standard_signature_matches_the_specifications_test_vector() -> None:
    # the example of the Standard Webhooks specification (secret, id, timestamp, body, signature)
    assert (
        standard_signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            b'{"test": 2432232314}',
        )
        == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="16"):
        InboundChannel("chat", "short", "alice")
    with pytest.raises(ValueError, match="16"):
        WebhookTarget("https://x.example.com", "short")
    with pytest.raises(ValueError, match="base64"):
        WebhookTarget("https://x.example.com", "whsec_not*base64*at*all")
    with pytest.raises(ValueError, match="16"):
        WebhookTarget("https://x.example.com", "whsec_c2hvcnQtc2hvcnQ=")  # 11 bytes
    with pytest.raises(ValueError, match="unknown notification"):
        WebhookTarget("https://x.example.com", SECRET, frozenset({"text_delta"}))
