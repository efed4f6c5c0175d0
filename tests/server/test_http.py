"""End to end over real HTTP: the collector's own sender into a real uvicorn server."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import gradwatch
from gradwatch.core.nonfinite import decode_float
from gradwatch_server.settings import Settings
from tests.server.live import live_server, wait_for
from tests.server.training import make, spooled, train


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.loads(reply.read())


def test_a_training_run_streams_to_the_server_complete_and_exact(settings: Settings) -> None:
    with live_server(settings) as url:
        model, opt = make()
        with gradwatch.watch(model, opt, server=url, project="live", tags=["e2e"]) as run:
            train(run, model, opt, 30)
        frames, grad_norms = spooled(run)
        detail = get(f"{url}/api/v1/runs/{run.id}")
        assert (detail["status"], detail["steps"], detail["project"]) == ("finished", 30, "live")
        assert detail["frames"] == frames
        assert detail["tags"] == ["e2e"]
        assert detail["fingerprint"]["config_hash"] == detail["config_hash"]
        tensor = detail["start"]["tensors"][0]["name"]
        series = get(f"{url}/api/v1/runs/{run.id}/series?tensor={tensor}&points=1000")["data"][0]
        assert series["steps"] == list(range(1, 31))
        assert [decode_float(v) for v in series["values"]] == grad_norms


def test_http_and_spool_import_together_store_each_frame_once(
    settings: Settings, data_dir: Path
) -> None:
    with live_server(settings.with_(import_interval=0.1)) as url:
        model, opt = make()
        with gradwatch.watch(model, opt, server=url) as run:
            train(run, model, opt, 25)
        frames, _ = spooled(run)

        def imported() -> bool:
            listed = get(f"{url}/api/v1/runs")["data"]
            return bool(listed) and listed[0]["frames"] == frames

        wait_for(imported, "the run's frames to be stored")
        runs = get(f"{url}/api/v1/runs")
        assert runs["count"] == 1
        assert (runs["data"][0]["status"], runs["data"][0]["steps"]) == ("finished", 25)
