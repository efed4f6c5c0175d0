"""``GET /runs/{id}/structure`` and ``GET /groups/{key}/structure`` over loopback HTTP on
real SQLite, from real training runs: the server derives the same structure findings as
``gradwatch findings`` does from the local spool, names the group's invariants and which
one a replicate breaks, and shows nothing to a token of another project."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradwatch import cli
from gradwatch.commands.findings import local_findings, structure_findings
from gradwatch.core.paths import runs_dir
from gradwatch_server.cli_actions import new_token
from gradwatch_server.settings import Settings
from tests.server.live import live_server, sqlite_with
from tests.server.structure_runs import CLIP_UNTIL, STEPS, clip_dropped_unclosed, record

STRUCTURE_CHECKS = {"structure-change", "structure-safeguard", "group-invariant"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The data directory of the four runs (trained once for the module) and their ids."""
    root = tmp_path_factory.mktemp("structure-data")
    return root, record(root)


@pytest.fixture
def served(recorded: tuple[Path, dict[str, str]], tmp_path: Path) -> Iterator[str]:
    """A live server on SQLite holding the four runs (imported from their spools)."""
    root, ids = recorded
    url, engine = sqlite_with(tmp_path / "gw.db", *(runs_dir(root) / i for i in ids.values()))
    engine.dispose()
    with live_server(Settings(db_url=url, data_dir=root, import_interval=None)) as base:
        yield base


def get(base: str, path: str, token: str | None = None, **query: Any) -> Any:
    """The JSON reply of ``GET /api/v1{path}``; ``HTTPError`` for a 4xx/5xx."""
    request = urllib.request.Request(f"{base}/api/v1{path}?{urllib.parse.urlencode(query)}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def status(base: str, path: str, token: str | None = None, **query: Any) -> int:
    try:
        get(base, path, token, **query)
    except urllib.error.HTTPError as e:
        return e.code
    return 200


def key_of(base: str, run_id: str) -> str:
    return str(get(base, f"/runs/{run_id}")["group"])


def essentials(found: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(f["check"], f["severity"], f["step"], f["message"]) for f in found]


def structure_of(run_dir: Path) -> list[dict[str, Any]]:
    """A run's structure findings as ``gradwatch findings`` has them: those the collector
    stored with the run and those derived when read (the group's), by step."""
    stored = [f for f in local_findings(run_dir) if f["check"] in STRUCTURE_CHECKS]
    return sorted(stored + structure_findings(run_dir), key=lambda f: int(f["step"]))


def test_the_server_reads_what_gradwatch_findings_reads_locally(
    recorded: tuple[Path, dict[str, str]], served: str
) -> None:
    root, ids = recorded
    for name, run_id in ids.items():
        local = structure_of(runs_dir(root) / run_id)
        remote = get(served, f"/runs/{run_id}/structure")
        assert essentials(remote["data"]) == essentials(local), name
        assert remote["count"] == len(local) and not remote["truncated"]
    # the cases are not vacuous: a dropped safeguard and a group break are among them
    assert [f["check"] for f in get(served, f"/runs/{ids['clip-dropped']}/structure")["data"]] == [
        "structure-safeguard"
    ]
    assert [f["check"] for f in get(served, f"/runs/{ids['twin-c']}/structure")["data"]] == [
        "group-invariant"
    ]


def test_clipping_dropped_at_step_30_is_a_timeline_event_at_its_step(
    recorded: tuple[Path, dict[str, str]], served: str
) -> None:
    _, ids = recorded
    reply = get(served, f"/runs/{ids['clip-dropped']}/structure")
    (event,) = reply["data"]
    assert (event["step"], event["severity"], event["optimizer"]) == (CLIP_UNTIL, "warning", 0)
    assert event["message"] == (
        f"From step {CLIP_UNTIL}, clip_grad_norm_ is no longer called before step(): it was "
        f"called on every step from step 1 to step {CLIP_UNTIL - 1}, and the last "
        f"{STEPS - CLIP_UNTIL + 1} steps of the run are not clipped."
    )
    assert event["details"]["safeguard"] == "clipping"
    assert reply["steps_read"] == STEPS and reply["problems"] == []
    beyond = get(served, f"/runs/{ids['clip-dropped']}/structure", offset=1, limit=5)
    assert (beyond["data"], beyond["count"]) == ([], 1)  # paged: the count is the whole run's
    assert status(served, f"/runs/{ids['clip-dropped']}/structure", limit=1001) == 422
    assert status(served, "/runs/nope/structure") == 404


def test_the_group_names_its_invariants_and_the_replicate_that_breaks_one(
    recorded: tuple[Path, dict[str, str]], served: str
) -> None:
    _, ids = recorded
    group = get(served, f"/groups/{key_of(served, ids['twin-a'])}/structure")
    assert group["project"] == "structure"
    assert group["learned_from_names"] == ["twin-a", "twin-b"]
    texts = {i["invariant"]: i["text"] for i in group["invariants"]}
    assert texts["grads-always"] == (
        "3 tensors (0.weight, 2.weight, 2.bias) each received a gradient on every step"
    )
    assert texts["lifecycle"] == "every step after the first was 'zero_grad backward step'"
    assert texts["state:hp:g0.weight_decay"] == "param group 0's weight_decay: '0' on every step"
    runs = {r["name"]: r for r in group["runs"]}
    assert [r["breaks"] for r in (runs["twin-a"], runs["twin-b"])] == [[], []]
    assert runs["twin-c"]["breaks"] == [
        {
            "invariant": "grads-always",
            "step": 1,
            "message": "0.weight received a gradient on every step in runs twin-a, "
            "twin-b; in this run it has none from step 1.",
        }
    ]
    assert [r["learned_from"] for r in group["runs"]] == [True, True, False]
    assert all(r["not_checked"] is None for r in group["runs"])
    assert status(served, "/groups/nope:none/structure") == 404
    assert status(served, "/groups/no-colon/structure") == 422


def test_findings_json_from_the_server_carries_the_structure_findings(
    recorded: tuple[Path, dict[str, str]], served: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root, ids = recorded
    for run_id in (ids["clip-dropped"], ids["twin-c"]):
        assert cli.main(["findings", run_id, "--json", "--data-dir", str(root)]) == 0
        local = json.loads(capsys.readouterr().out)
        assert cli.main(["findings", run_id, "--json", "--server", served]) == 0
        remote = json.loads(capsys.readouterr().out)
        mine = [
            [
                {k: f[k] for k in ("check", "severity", "step", "message")}
                for f in found
                if f["check"] in STRUCTURE_CHECKS
            ]
            for found in (local, remote)
        ]
        assert mine[0] == mine[1] and mine[0], run_id
        assert len(mine[0]) == 1, run_id  # once: stored (or derived), never both


def test_the_clip_dropped_runs_warning_is_a_stored_finding_of_the_run(
    recorded: tuple[Path, dict[str, str]], served: str
) -> None:
    """The collector stored it: the run's findings, its health and its status count it,
    and the server's structure reply gives that stored finding (its incident too)."""
    root, ids = recorded
    run_id = ids["clip-dropped"]
    stored = [f for f in local_findings(runs_dir(root) / run_id) if f["check"] in STRUCTURE_CHECKS]
    assert [(f["check"], f["step"], f["role"]) for f in stored] == [
        ("structure-safeguard", CLIP_UNTIL, "cause")
    ]
    assert structure_findings(runs_dir(root) / run_id) == []  # not derived again
    findings = get(served, f"/runs/{run_id}/findings")["data"]
    assert [(f["check"], f["step"]) for f in findings] == [("structure-safeguard", CLIP_UNTIL)]
    run = get(served, f"/runs/{run_id}")
    assert (run["status"], run["findings"]["warning"]) == ("finished", 1)


def test_a_run_that_never_closed_has_its_structure_derived_when_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No END record (the process was killed): nothing stored, so the readers derive the
    same warning from the recorded steps, locally and on the server."""
    monkeypatch.setenv("GRADWATCH_DIR", str(tmp_path))
    for var in ("GRADWATCH_SERVER", "GRADWATCH_JOB", "GRADWATCH_CHECKS"):
        monkeypatch.delenv(var, raising=False)
    run_id = clip_dropped_unclosed()
    run_dir = runs_dir(tmp_path) / run_id
    assert [f for f in local_findings(run_dir) if f["check"] in STRUCTURE_CHECKS] == []
    local = structure_findings(run_dir)
    assert [(f["check"], f["step"]) for f in local] == [("structure-safeguard", CLIP_UNTIL)]
    url, engine = sqlite_with(tmp_path / "gw.db", run_dir)
    engine.dispose()
    with live_server(Settings(db_url=url, data_dir=tmp_path, import_interval=None)) as base:
        assert essentials(get(base, f"/runs/{run_id}/structure")["data"]) == essentials(local)


def test_a_token_of_another_project_sees_neither_the_run_nor_the_group(
    recorded: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, ids = recorded
    url, engine = sqlite_with(tmp_path / "gw.db", *(runs_dir(root) / i for i in ids.values()))
    engine.dispose()
    settings = Settings(db_url=url, data_dir=root, import_interval=None, require_tokens=True)
    own, other = (new_token(settings, p, "read") for p in ("structure", "elsewhere"))
    with live_server(settings) as base:
        run = ids["twin-c"]
        assert status(base, f"/runs/{run}/structure") == 401
        assert status(base, f"/runs/{run}/structure", other) == 404
        assert status(base, f"/runs/{run}/structure", own) == 200
        key = str(get(base, f"/runs/{run}", own)["group"])
        assert status(base, f"/groups/{key}/structure", other) == 404
        assert status(base, f"/groups/{key}/structure", other, project="structure") == 403
        assert get(base, f"/groups/{key}/structure", own)["runs"][2]["breaks"]
