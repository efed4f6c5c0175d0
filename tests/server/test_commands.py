"""``gradwatch serve`` and ``gradwatch runs`` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import gradwatch
from gradwatch.cli import main
from tests.server.live import wait_for
from tests.server.training import make, spooled, train

FIELDS = {
    "id",
    "name",
    "project",
    "status",
    "steps",
    "config_hash",
    "code_hash",
    "started",
    "ended",
    "findings",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return json.loads(reply.read())
    except OSError:
        return None


def finished_run(steps: int = 6, **options: Any) -> tuple[gradwatch.Run, int]:
    model, opt = make()
    with gradwatch.watch(model, opt, **options) as run:
        train(run, model, opt, steps)
    return run, spooled(run)[0]


def test_serve_after_training_shows_the_run_complete_with_no_extra_command(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, frames = finished_run(project="newcomer")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gradwatch", "serve", "--port", str(port)],
        env={**os.environ, "GRADWATCH_DIR": str(data_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def complete() -> bool:
            listed = get(f"{url}/api/v1/runs") or {"data": []}
            return any(r["status"] == "finished" and r["frames"] == frames for r in listed["data"])

        wait_for(lambda: complete() or server.poll() is not None, "the server to import the run")
        assert main(["runs", "--json", "--server", url]) == 0
        (listed,) = json.loads(capsys.readouterr().out)
        assert set(listed) >= FIELDS
        assert (listed["id"], listed["project"], listed["steps"]) == (run.id, "newcomer", 6)
        assert listed["findings"] == {"info": 0, "warning": 0, "error": 0}
    finally:
        server.send_signal(signal.SIGINT)
        output = server.communicate(timeout=30)[0]
    assert (data_dir / "gradwatch.db").exists()
    assert "Traceback" not in output


def test_runs_without_a_server_reads_the_local_data_directory(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = finished_run(steps=3, project="p1", name="first")
    finished_run(steps=2, project="p2")
    assert main(["runs", "--json", "--project", "p1", "--db", db_url]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert set(listed) >= FIELDS
    assert (listed["id"], listed["name"], listed["status"], listed["steps"]) == (
        run.id,
        "first",
        "finished",
        3,
    )
    assert main(["runs", "--db", db_url]) == 0
    table = capsys.readouterr().out
    assert "p1" in table and "p2" in table and "finished" in table


def test_serve_refuses_a_public_bind_without_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["serve", "--host", "0.0.0.0", "--db", db]) == 2
    assert "needs API tokens" in capsys.readouterr().err
    assert main(["serve", "--db", db, "--create-token", "vision", "--scope", "read"]) == 0
    out = capsys.readouterr().out
    assert "read token for project 'vision'" in out and "gw_" in out


def test_runs_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--server", f"http://127.0.0.1:{free_port()}"]) == 1
    assert "cannot read runs" in capsys.readouterr().err


def status_of(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10):
            return 200
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@pytest.mark.parametrize("how", ["flag", "env"])
def test_serve_require_tokens_on_loopback_answers_401_without_a_token(
    data_dir: Path, how: str
) -> None:
    gw = [sys.executable, "-m", "gradwatch", "serve"]
    env = {**os.environ, "GRADWATCH_DIR": str(data_dir)}
    port = free_port()
    serve = [*gw, "--port", str(port)]
    if how == "flag":
        serve.append("--require-tokens")
    else:
        env["GRADWATCH_REQUIRE_TOKENS"] = "1"
    refused = subprocess.run(serve, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "none exists" in refused.stderr  # no one could use it
    made = subprocess.run(
        [*gw, "--create-token", "p", "--scope", "read"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    token = made.stdout.split()[-1]
    server = subprocess.Popen(
        serve, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: status_of(f"{url}/api/v1/health") or server.poll() is not None, "the server"
        )
        assert status_of(f"{url}/api/v1/runs") == 401
        assert status_of(f"{url}/api/v1/runs", token) == 200
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
