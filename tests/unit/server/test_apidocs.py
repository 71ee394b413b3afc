"""Interactive API docs at /docs: Swagger UI from the swagger-ui-py package, served by the app
itself (no CDN), no key needed, no inline script. tests/browser/test_api_docs.py renders it."""

from __future__ import annotations

import re

import httpx
import pytest

from fiduciary.server import apidocs

from .conftest import problem

pytestmark = pytest.mark.timeout(30)


async def test_the_docs_page_and_its_files_need_no_key(client: httpx.AsyncClient) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp
    assert "connect-src 'self';" in csp
    assert not re.search(r"<script>(?!</script>)", page.text)  # no inline script
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)  # nothing from elsewhere
    sources = re.findall(r'(?:src|href)="(docs/[^"]+)"', page.text)
    assert sources == ["docs/swagger-ui.css", "docs/swagger-ui-bundle.js", "docs/start.js"]
    folder = apidocs.swagger_ui_dir()
    assert folder is not None
    for source in sources:
        served = await client.get("/" + source)
        assert served.status_code == 200, source
        if source != "docs/start.js":  # the package's own file, byte for byte
            assert served.content == (folder / source.removeprefix("docs/")).read_bytes()
    start = (await client.get("/docs/start.js")).text
    assert '"openapi.json"' in start
    assert "validatorUrl: null" in start  # no badge fetched from the validator's site
    problem(await client.get("/docs/swagger-editor-bundle.js"), 404, "not_found")
    problem(await client.get("/docs/..%2Fapp.py"), 404, "not_found")


async def test_without_the_package_the_docs_say_how_to_get_it(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apidocs, "swagger_ui_dir", lambda: None)
    body = problem(await client.get("/docs"), 404, "not_available")
    assert "pip install 'fiduciary[server]'" in body["detail"]
