"""Lint findings stored with a run come back from the findings API marked confirmed when a
runtime finding of the same bug exists (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from gradwatch.core.confirm import mark
from gradwatch.core.wire import Kind, Record, encode_frame
from gradwatch.lint import lint_code
from tests.server import frames as f

SCRIPT = """
import torch
from torch import nn
model = nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in data:
    nn.functional.cross_entropy(torch.softmax(model(x), 1), y).backward()
    opt.step()
"""


def runtime(check: str, step: int, **details: Any) -> dict[str, Any]:
    return {
        "check": check,
        "severity": "error",
        "step": step,
        "optimizer": 0,
        "param": None,
        "message": f"{check} happened",
        "hint": "fix it",
        "details": details,
        "t": 1.0,
        "source": "runtime",
    }


def post_run(client: TestClient, lint: list[dict[str, Any]], rt: list[dict[str, Any]]) -> None:
    body = b"".join(f.simple_run("r1"))
    body += encode_frame(20, Record(Kind.FINDINGS, {"findings": lint}))
    body += encode_frame(21, Record(Kind.FINDINGS, {"findings": rt}))
    reply = client.post("/api/v1/ingest", content=body, headers=f.headers("r1"))
    assert reply.status_code == 200, reply.text


def get(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    reply = client.get("/api/v1/runs/r1/findings", params=params)
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def test_lint_findings_are_confirmed_by_runtime_findings_of_the_same_bug(
    client: TestClient,
) -> None:
    lint = [x.to_meta() for x in lint_code(SCRIPT, "train.py")]
    assert {x["check"] for x in lint} == {
        "stale-grad",
        "softmax-into-cross-entropy",
        "unseeded-run",
    }
    rt = [
        runtime("stale-grad", 4),
        runtime("stale-grad", 2),
        runtime("nondeterminism-risk", 0, risks=[{"field": "determinism.cudnn_benchmark"}]),
    ]
    post_run(client, lint, rt)
    got = {(x["source"], x["check"], x["step"]): x for x in get(client)}
    stale = got["lint", "stale-grad", None]
    assert stale["confirmed"] is True
    assert stale["confirmed_by"] == {"check": "stale-grad", "step": 2}
    assert stale["details"]["path"] == "train.py" and stale["details"]["line"] == 8
    assert got["lint", "softmax-into-cross-entropy", None]["confirmed"] is False
    # a nondeterminism risk that is not the seed does not confirm unseeded-run
    assert got["lint", "unseeded-run", None]["confirmed"] is False
    assert got["runtime", "stale-grad", 2]["confirmed"] is None
    # the same answer as `gradwatch findings` computes from the local spool
    local = {(x["source"], x["check"], x["step"]): x for x in mark([*lint, *rt])}
    for key, item in got.items():
        assert (item["confirmed"], item["confirmed_by"]) == (
            local[key]["confirmed"],
            local[key]["confirmed_by"],
        )


def test_confirmation_does_not_depend_on_the_page_or_filter(client: TestClient) -> None:
    lint = [x.to_meta() for x in lint_code(SCRIPT, "train.py")]
    seed = [{"field": "seeds.torch_seed_user_set", "value": "false"}]
    post_run(client, lint, [runtime("nondeterminism-risk", 0, risks=seed)])
    only = get(client, check="unseeded-run")
    assert [(x["source"], x["confirmed"]) for x in only] == [("lint", True)]
    assert only[0]["confirmed_by"] == {"check": "nondeterminism-risk", "step": 0}
    assert [x["confirmed"] for x in get(client, check="stale-grad")] == [False]
    pages = [get(client, offset=i, limit=1)[0] for i in range(4)]
    assert sorted(str(x["confirmed"]) for x in pages) == ["False", "False", "None", "True"]
