"""The web console is served by the same process: no build step, a strict CSP."""

from __future__ import annotations

import re

import httpx
import pytest

from fiduciary.server.pages import STATIC_DIR

from .conftest import Keys, bearer, problem

pytestmark = pytest.mark.timeout(30)


async def test_the_console_and_its_files(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert '<script src="/static/app.js" defer></script>' in page.text
    assert '<script src="/static/views.js" defer></script>' in page.text
    assert '<script src="/static/audit.js" defer></script>' in page.text
    assert '<script src="/static/dual.js" defer></script>' in page.text
    assert '<script src="/static/passkeys.js" defer></script>' in page.text
    assert not re.search(r"<script>(?!</script>)", page.text)  # no inline script
    script = await client.get("/static/app.js")
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert (await client.get("/static/views.js")).status_code == 200
    assert (await client.get("/static/audit.js")).status_code == 200
    assert (await client.get("/static/dual.js")).status_code == 200
    assert (await client.get("/static/passkeys.js")).status_code == 200
    assert (await client.get("/static/style.css")).headers["content-type"].startswith("text/css")
    problem(await client.get("/static/../app.py"), 404, "not_found")
    problem(await client.get("/static/app.py"), 404, "not_found")


@pytest.mark.parametrize(
    "name", ["app.js", "views.js", "audit.js", "dual.js", "passkeys.js", "questions.js", "tree.js"]
)
def test_the_scripts_never_parse_server_text_as_html(name: str) -> None:
    script = (STATIC_DIR / name).read_text(encoding="utf-8")
    assert "innerHTML" not in script
    assert "outerHTML" not in script
    assert "insertAdjacentHTML" not in script
    assert "eval(" not in script


async def test_balances_need_a_hook(
    client: httpx.AsyncClient, keys: Keys, make_app: object
) -> None:
    problem(await client.get("/balances", headers=bearer(keys.alice)), 404, "not_available")


async def test_balances_from_the_hook(keys: Keys, make_app: object) -> None:
    from decimal import Decimal

    from .conftest import client_for

    async def balances(principal: str) -> dict[str, Decimal]:
        return {"USD": Decimal("12.50")} if principal == "alice" else {}

    app = make_app(balances=balances)  # type: ignore[operator]
    async with client_for(app) as client:
        response = await client.get("/balances", headers=bearer(keys.alice))
        assert response.json() == {
            "principal": "alice",
            "balances": {"USD": "12.50"},
            "usd": {},
            "total_usd": None,
        }
        response = await client.get("/balances", headers=bearer(keys.bob))
        assert response.json() == {
            "principal": "bob",
            "balances": {},
            "usd": {},
            "total_usd": None,
        }


async def test_balances_with_their_usd_values(keys: Keys, make_app: object) -> None:
    from decimal import Decimal

    from fiduciary.server import Balances

    from .conftest import client_for

    def balances(principal: str) -> Balances:
        return Balances(
            balances={"SUI": Decimal("150.000000000"), "USDC": Decimal("12.5")},
            usd={"SUI": Decimal("525.00"), "USDC": Decimal("12.50")},
            total_usd=Decimal("537.50"),
        )

    app = make_app(balances=balances)  # type: ignore[operator]
    async with client_for(app) as client:
        response = await client.get("/balances", headers=bearer(keys.alice))
        assert response.json() == {
            "principal": "alice",
            "balances": {"SUI": "150.000000000", "USDC": "12.5"},
            "usd": {"SUI": "525.00", "USDC": "12.50"},
            "total_usd": "537.50",
        }


async def test_health(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
