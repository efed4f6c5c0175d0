"""``/docs`` (Swagger UI) and ``/redoc`` work on a machine without internet access: every
script and stylesheet they load is served by gradwatch itself."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(("page", "assets"), [("/docs", 2), ("/redoc", 1)])
def test_api_docs_load_only_assets_the_server_serves(
    client: TestClient, page: str, assets: int
) -> None:
    html = client.get(page)
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    urls = re.findall(r"""(?:src|href)=["']([^"']+\.(?:js|css))["']""", html.text)
    assert len(urls) >= assets, html.text
    for url in urls:
        assert url.startswith("/"), f"{page} loads {url} from another host"
        served = client.get(url)
        assert served.status_code == 200 and len(served.content) > 10_000, url
    assert "cdn." not in html.text and "fonts.googleapis" not in html.text
    assert client.get("/openapi.json").json()["info"]["title"] == "gradwatch"
