"""Schemathesis against the served OpenAPI spec: no request it can build gets a 5xx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from gradwatch.core.wire import FRAME_CONTENT_TYPE
from gradwatch_server.app import create_app
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL

schemathesis.serializer.alias(FRAME_CONTENT_TYPE, "application/octet-stream")


@pytest.fixture
def api_schema(db_url: str, data_dir: Path) -> Any:
    """The app's own spec, with a run in the database for the routes to find (schemathesis's
    ASGI client names the host ``testserver``: served like a name given to --allowed-host)."""
    settings = Settings(
        db_url=db_url, data_dir=data_dir, import_interval=None, allowed_hosts=("testserver",)
    )
    app = create_app(settings)
    with TestClient(app, base_url=LOCAL) as client:
        client.post("/api/v1/ingest", content=b"".join(f.simple_run("r1")), headers=f.headers("r1"))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def test_no_request_built_from_the_spec_gets_a_5xx(api_schema: Any) -> None:
    """Every operation, with generated paths, queries, headers and bodies (schemathesis'
    pytest plugin is driven by hand: it does not load under this pytest version)."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/api/v1/ingest", "/api/v1/runs/{run_id}/series"}
    called: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            response = case.call_and_validate(checks=[schemathesis.checks.not_a_server_error])
            called.append(f"{case.method} {case.path} {response.status_code // 100}xx")

        check()
    assert {c.rsplit(" ", 1)[0] for c in called} == {
        f"{o.method.upper()} {o.path}" for o in operations
    }
    assert any(c.endswith("4xx") for c in called) and any(c.endswith("2xx") for c in called)
