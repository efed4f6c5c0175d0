"""Two ``gradwatch serve`` processes on one PostgreSQL ingest concurrently, losing nothing."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from gradwatch.transport.sender import INGEST_PATH, HTTPTransport
from gradwatch_server.db import make_engine
from tests.server import frames as f
from tests.server.conftest import _empty
from tests.server.live import wait_for
from tests.server.test_commands import free_port, get

RUNS, WINDOWS, STEPS = 4, 12, 5


@pytest.fixture
def two_servers(pg_url: str, tmp_path: Path) -> Iterator[list[str]]:
    _empty(pg_url)
    procs, urls = [], []
    for i in range(2):
        port = free_port()
        cmd = [sys.executable, "-m", "gradwatch", "serve", "--port", str(port), "--db", pg_url]
        env = {**os.environ, "GRADWATCH_DIR": str(tmp_path / f"data{i}")}
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url, proc in zip(urls, procs, strict=True):
            wait_for(
                lambda u=url, p=proc: get(f"{u}/api/v1/health") or p.poll() is not None, "serve"
            )
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
            assert "Traceback" not in err, err


def run_frames(run: str) -> list[bytes]:
    rng = np.random.default_rng(abs(hash(run)) % 1000)
    stats = rng.random((WINDOWS * STEPS, 3, 4), dtype=np.float32)
    windows = [f.steps(1 + w * STEPS, stats[w * STEPS : (w + 1) * STEPS]) for w in range(WINDOWS)]
    return f.frames(
        [f.start(run, "scale", ["a", "b", "c"]), *windows, f.end(steps_done=WINDOWS * STEPS)]
    )


def sender(url: str, run: str, frames: list[bytes], seed: int, errors: list[str]) -> None:
    """Send every frame (in a random order, some in batches, some twice) to one server."""
    rng = random.Random(seed)
    order = list(range(len(frames))) + rng.sample(range(len(frames)), len(frames) // 2)
    rng.shuffle(order)
    transport = HTTPTransport(url)
    try:
        for i in range(0, len(order), 3):
            body = b"".join(frames[j] for j in order[i : i + 3])
            reply = transport.post(INGEST_PATH, body, f.headers(run), 60)
            if reply.status != 200:
                errors.append(f"{url} {run}: HTTP {reply.status} {reply.body[:200]!r}")
    finally:
        transport.close()


def test_two_servers_on_one_postgres_store_every_frame_exactly_once(
    two_servers: list[str], pg_url: str
) -> None:
    runs = {f"scale-{i}": run_frames(f"scale-{i}") for i in range(RUNS)}
    errors: list[str] = []
    threads = [
        threading.Thread(target=sender, args=(url, run, frames, k * 7 + i, errors))
        for k, (run, frames) in enumerate(runs.items())
        for i, url in enumerate(two_servers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        per_run = dict(
            conn.execute(text("SELECT run_id, count(*) FROM ingested_frames GROUP BY run_id")).all()
        )
        runs_rows = conn.execute(
            text("SELECT id, frames, steps, end_status FROM runs ORDER BY id")
        ).all()
        chunks = conn.execute(
            text("SELECT count(*), count(DISTINCT (run_id, seq)) FROM series_chunks")
        ).one()
        projects = conn.execute(text("SELECT name FROM projects ORDER BY name")).scalars().all()
    engine.dispose()
    expected = WINDOWS + 2
    assert per_run == dict.fromkeys(runs, expected)
    assert [tuple(r) for r in runs_rows] == [
        (r, expected, WINDOWS * STEPS, "finished") for r in sorted(runs)
    ]
    assert tuple(chunks) == (RUNS * WINDOWS, RUNS * WINDOWS)
    assert projects in (["scale"], ["default", "scale"])
    for url in two_servers:
        series = get(f"{url}/api/v1/runs/scale-0/series?tensor=b&points=1000")["data"][0]
        assert series["steps"] == list(range(1, WINDOWS * STEPS + 1))
