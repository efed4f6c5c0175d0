"""scripts/setup_test_env.sh, the set-up of ``make test``: it uses a PostgreSQL that answers,
else starts (and afterwards removes) a throwaway cluster from the installed binaries, and
where it may not install a package it stops with the one command to run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bash(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"source scripts/setup_test_env.sh\n{script}"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "GRADWATCH_TEST_PG"} | env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_without_a_server_a_throwaway_cluster_serves_and_is_removed() -> None:
    query = (
        "import os, psycopg; url = os.environ['GRADWATCH_TEST_PG']; "
        "print(psycopg.connect(url).execute('select 41 + 1').fetchone())"
    )
    out = bash(
        f'gw_need_postgres || exit 9\n{sys.executable} -c "{query}"\necho "dir=$GW_PG_DIR"\n'
        "gw_cleanup",
        GRADWATCH_PG_PROBE=f"127.0.0.1:{closed_port()}",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "starting a throwaway cluster" in out.stdout and "(42,)" in out.stdout
    assert "stopped and removed" in out.stdout
    folder = next(line[4:] for line in out.stdout.splitlines() if line.startswith("dir="))
    assert folder and not Path(folder).exists()


def test_a_server_that_answers_is_used_as_it_is() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe = f"127.0.0.1:{server.getsockname()[1]}"
        out = bash(
            'gw_need_postgres && echo "url=${GRADWATCH_TEST_PG:-}"', GRADWATCH_PG_PROBE=probe
        )
    assert out.returncode == 0, out.stderr
    assert f"PostgreSQL: the server on {probe}" in out.stdout and "url=\n" in out.stdout


def test_without_root_a_missing_package_stops_with_the_command_to_run() -> None:
    script = 'gw_install "a C compiler builds the kernel" gcc libc6-dev; echo "status=$?"'
    if os.geteuid() == 0:  # as root it would install: ask as an unprivileged user instead
        cmd = [
            "runuser",
            "-u",
            "nobody",
            "--",
            "bash",
            "-c",
            f"source ./setup_test_env.sh\n{script}",
        ]
        out = subprocess.run(
            cmd, cwd=ROOT / "scripts", capture_output=True, text=True, timeout=60, check=False
        )
    else:
        out = bash(script)
    assert "status=1" in out.stdout, out.stdout + out.stderr
    assert out.stderr.strip() == (
        "gradwatch tests: gcc libc6-dev not installed (a C compiler builds the kernel). "
        "Run: sudo apt-get install -y gcc libc6-dev"
    )
