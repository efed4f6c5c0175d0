"""A run that went NaN: the server keeps where it came from (``details.origin``) and the
checkpoint path with the finding, for the run page."""

from __future__ import annotations

from fastapi.testclient import TestClient

import gradwatch
from gradwatch_server.app import create_app
from gradwatch_server.settings import Settings
from tests.collector.scripts import nan_train
from tests.server.live import LOCAL, wait_for


def test_origin_and_checkpoint_reach_the_findings_api(settings: Settings) -> None:
    checks = {"nonfinite-loss": "checkpoint"}
    try:
        nan_train.train("log-softmax", 7, 5, checks=checks)
    except gradwatch.IntegrityError as exc:
        run = exc.run  # type: ignore[attr-defined]
    with TestClient(create_app(settings.with_(import_interval=0.1)), base_url=LOCAL) as client:
        url = f"/api/v1/runs/{run.id}/findings"
        wait_for(lambda: client.get(url).status_code == 200, "the run's import")
        wait_for(lambda: bool(client.get(url).json()["data"]), "its findings")
        got = [f for f in client.get(url).json()["data"] if f["check"] == "nonfinite-loss"]
    assert len(got) == 1 and got[0]["step"] == 5
    origin = got[0]["details"]["origin"]
    assert (origin["module"], origin["op"], origin["autograd_node"]) == (
        "out",
        "log",
        "LogBackward0",
    )
    assert origin["output"]["neginf"] > 0 and origin["summary"] in got[0]["message"]
    assert got[0]["details"]["checkpoint"].endswith("step-5-nonfinite-loss.pt")
