"""Replicate groups, pinned baselines, live comparison and seed envelopes on the server,
from real training runs (each trained in its own process; see tests/collector/drift_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gradwatch import cli
from gradwatch.core.drift.verdict import compare, from_local
from gradwatch.core.local_reader import load_run
from gradwatch.core.paths import runs_dir
from gradwatch_server.app import create_app
from gradwatch_server.db import make_engine, write_session
from gradwatch_server.drift.live import drift_pass, envelope_pass
from gradwatch_server.ingest.spool_import import import_run
from gradwatch_server.migrate import migrate
from gradwatch_server.models import DriftState
from gradwatch_server.settings import Settings
from gradwatch_server.store import insert_ignore
from tests.collector.drift_runs import BUGGY
from tests.server import frames as f
from tests.server.live import LOCAL, live_server

pytestmark = pytest.mark.slow
DRIFTED = {"shuffle": 17, "perturb": 7, "threads": 4, "version": 5}


def drift_findings(client: TestClient, run_id: str, check: str) -> list[dict[str, Any]]:
    reply = client.get(f"/api/v1/runs/{run_id}/findings", params={"check": check})
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def test_groups_baseline_live_drift_and_envelope(
    settings: Settings, drift_runs: tuple[Path, dict[str, str]], request: pytest.FixtureRequest
) -> None:
    root, ids = drift_runs
    engine = make_engine(settings.db_url)
    request.addfinalizer(engine.dispose)
    migrate(engine)
    import_run(engine, runs_dir(root) / ids["base"])
    assert drift_pass(engine) == []  # nothing to compare with yet
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        base = client.get(f"/api/v1/runs/{ids['base']}").json()
        key = base["group"]
        assert key == f"{base['config_hash']}:{base['code_hash']}" and base["seed"] == 0
        pinned = client.put(f"/api/v1/groups/{key}/baseline", json={"run": ids["base"]}).json()
        assert pinned["baseline"] == ids["base"]
        for name in ids.keys() - {"base"}:
            import_run(engine, runs_dir(root) / ids[name])
        diverged = drift_pass(engine)
        assert sorted(diverged) == sorted(ids[name] for name in DRIFTED)
        assert drift_pass(engine) == []  # compared once: a second pass finds nothing new
        for name, step in DRIFTED.items():
            (found,) = drift_findings(client, ids[name], "repro-drift")
            assert (found["step"], found["severity"], found["source"]) == (
                step,
                "warning",
                "server",
            )
            assert found["details"]["reference"] == ids["base"]
        (perturbed,) = drift_findings(client, ids["perturb"], "repro-drift")
        assert perturbed["param"] == "2.weight"
        assert perturbed["details"]["cause"] == "backward-nondeterminism"
        assert drift_findings(client, ids["same"], "repro-drift") == []

        assert envelope_pass(engine) == [ids[BUGGY]]
        assert envelope_pass(engine) == [ids[BUGGY]]  # idempotent: still one finding
        assert len(drift_findings(client, ids[BUGGY], "seed-envelope")) == 1

        group = client.get(f"/api/v1/groups/{key}").json()
        assert group["seeds"] == [0, 1, 2, 3, 4] and group["baseline"] == ids["base"]
        assert sorted(group["drifted"]) == sorted(ids[name] for name in DRIFTED)
        assert group["outside_envelope"] == [ids[BUGGY]]
        listed = client.get("/api/v1/groups", params={"project": "drift"}).json()
        assert listed["count"] == 2  # the changed-lr run is a group of its own
        members = client.get("/api/v1/runs", params={"group": key}).json()
        assert members["count"] == len(ids) - 1
        envelope = client.get(f"/api/v1/groups/{key}/envelope").json()
        assert [r["id"] for r in envelope["runs"] if r["outside"]] == [ids[BUGGY]]
        assert len(envelope["steps"]) == len(envelope["low"]) == 30

        served = client.get(
            "/api/v1/compare", params={"a": ids["base"], "b": ids["perturb"]}
        ).json()
        local = compare(
            from_local(load_run(runs_dir(root) / ids["base"])),
            from_local(load_run(runs_dir(root) / ids["perturb"])),
        )
        keys = ("verdict", "step", "metric", "param", "cause", "exact", "steps_compared")
        assert {k: served[k] for k in keys} == {k: local[k] for k in keys}
        assert served["difference"] == pytest.approx(local["difference"])

        unpinned = client.delete(f"/api/v1/groups/{key}/baseline").json()
        assert unpinned["baseline"] is None
        wrong = client.put(f"/api/v1/groups/{key}/baseline", json={"run": ids["config"]})
        assert wrong.status_code == 422 and "not in group" in wrong.json()["detail"]
        assert client.get("/api/v1/groups/nokey").status_code == 422
        assert client.get("/api/v1/compare", params={"a": "x", "b": "y"}).status_code == 404


def test_cli_compare_asks_the_server(
    tmp_path: Path, drift_runs: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, ids = drift_runs
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'cli.db'}",
        data_dir=tmp_path / "empty",
        import_interval=None,
        monitor_interval=None,
    )
    engine = make_engine(settings.db_url)
    migrate(engine)
    for name in ("base", "init"):
        import_run(engine, runs_dir(root) / ids[name])
    engine.dispose()
    with live_server(settings) as url:
        code = cli.main(["compare", ids["base"], ids["init"], "--server", url, "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 1
        assert (out["verdict"], out["cause"], out["step"], out["param"]) == (
            "diverged",
            "init",
            1,
            "0.weight",
        )
        assert cli.main(["compare", ids["base"], "missing", "--server", url]) == 2
        assert "no run 'missing'" in capsys.readouterr().err


def test_a_sweep_with_a_run_without_steps_stops_no_envelope(
    settings: Settings, drift_runs: tuple[Path, dict[str, str]], request: pytest.FixtureRequest
) -> None:
    """A seed sweep that has only just started (one run has no steps yet), imported before
    the drift runs: its group's envelope reads, and the groups after it are still checked."""
    root, ids = drift_runs
    engine = make_engine(settings.db_url)
    request.addfinalizer(engine.dispose)
    migrate(engine)
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        for seed in range(3):
            run = f"early-{seed}"
            records = [f.start(run, "drift", config_hash="early")]
            records += [f.steps(1, np.ones((3, 2, 4), "f4"))] if seed else []
            body = b"".join(f.frames(records))
            assert client.post("/api/v1/ingest", content=body, headers=f.headers(run)).is_success
        with write_session(engine) as session:
            seeds = [{"run_id": f"early-{seed}", "seed": seed} for seed in range(3)]
            insert_ignore(session, DriftState, seeds)
        for name in ids:
            import_run(engine, runs_dir(root) / ids[name])
        drift_pass(engine)
        assert envelope_pass(engine) == [ids[BUGGY]]
        assert client.get("/api/v1/groups/early:none/envelope").status_code == 200
