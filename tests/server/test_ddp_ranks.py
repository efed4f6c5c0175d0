"""DDP: every rank's stream is stored as a run of one group, listed with its rank."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.server import frames as f


def _ddp(group: str, rank: int, world: int = 2) -> dict[str, object]:
    return {"group": group, "rank": rank, "world_size": world, "local_rank": rank, "host": "n1"}


def _post(client: TestClient, run: str, **meta: object) -> int:
    body = b"".join(f.frames([f.start(run, "ddp", **meta), f.end()]))
    reply = client.post("/api/v1/ingest", content=body, headers=f.headers(run))
    return reply.status_code


def test_ranks_of_one_run_are_listed_together(client: TestClient) -> None:
    assert _post(client, "g1", ddp=_ddp("g1", 0)) == 200
    assert _post(client, "g1.rank1", ddp=_ddp("g1", 1)) == 200
    assert _post(client, "solo") == 200
    ranks = client.get("/api/v1/runs", params={"ddp_group": "g1"}).json()
    assert ranks["count"] == 2
    got = sorted((r["id"], r["ddp_group"], r["rank"], r["world_size"]) for r in ranks["data"])
    assert got == [("g1", "g1", 0, 2), ("g1.rank1", "g1", 1, 2)]
    solo = client.get("/api/v1/runs/solo").json()
    assert (solo["ddp_group"], solo["rank"], solo["world_size"]) == (None, None, None)
    assert client.get("/api/v1/runs/g1.rank1").json()["start"]["ddp"]["rank"] == 1


@pytest.mark.parametrize(
    ("ddp", "field"),
    [
        ({"group": "g", "rank": 2, "world_size": 2}, "meta.ddp.rank"),
        ({"group": "g", "rank": 0, "world_size": 0}, "meta.ddp.world_size"),
        ({"rank": 0, "world_size": 2}, "meta.ddp.group"),
        ("rank0", "meta.ddp"),
    ],
)
def test_a_bad_rank_is_refused_and_stores_nothing(
    client: TestClient, ddp: object, field: str
) -> None:
    body = b"".join(f.frames([f.start("bad", "ddp", ddp=ddp)]))
    reply = client.post("/api/v1/ingest", content=body, headers=f.headers("bad"))
    assert reply.status_code == 422 and field in reply.text
    assert client.get("/api/v1/runs").json()["count"] == 0
