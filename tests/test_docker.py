"""docker/: the Dockerfile and compose file are checked here, without a Docker engine.

No Docker engine runs on the development or CI machines, so nothing is built. Instead:

- the Dockerfile is parsed with BuildKit's own parser (the ``dockerfile`` package wraps
  it), and on top of what that parser checks (it only splits) every instruction must be
  known with its arguments, exec forms must be valid JSON, every ``RUN`` must pass
  ``sh -n``, every ``COPY`` source must exist, and the recipe must install this package
  with the ``[server]`` requirements read from pyproject.toml, and never torch;
- compose.yaml is validated against the compose specification's JSON schema (vendored by
  ``check-jsonschema``) and its wiring is checked (server → PostgreSQL service);
- the premise of a torch-free image is tested for real: ``gradwatch serve`` runs, stores
  an ingested batch and manages tokens with ``import torch`` made to fail.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import dockerfile
import jsonschema
import pytest
import tomllib
import yaml

from gradwatch.transport.sender import INGEST_PATH, HTTPTransport
from tests.server import frames as f
from tests.server.live import wait_for
from tests.server.test_commands import free_port, get

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
# instruction -> minimum number of arguments (BuildKit's dispatcher rules)
INSTRUCTIONS = {
    "FROM": 1, "RUN": 1, "CMD": 1, "LABEL": 1, "EXPOSE": 1, "ENV": 2, "ADD": 2, "COPY": 2,
    "ENTRYPOINT": 1, "VOLUME": 1, "USER": 1, "WORKDIR": 1, "ARG": 1, "ONBUILD": 1,
    "STOPSIGNAL": 1, "HEALTHCHECK": 1, "SHELL": 1,
}  # fmt: skip


def dockerfile_problems(text: str, context: Path) -> list[str]:
    """What keeps ``text`` from being a buildable Dockerfile (empty when none)."""
    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as e:
        return [f"BuildKit parser: {e}"]
    problems = []
    if not commands or commands[0].cmd.upper() not in ("FROM", "ARG"):
        problems.append("the first instruction must be FROM (or ARG)")
    for c in commands:
        name, where = c.cmd.upper(), f"line {c.start_line}"
        if name not in INSTRUCTIONS:
            problems.append(f"{where}: unknown instruction {c.cmd}")
            continue
        if len([v for v in c.value if v]) < INSTRUCTIONS[name]:
            problems.append(f"{where}: {name} needs at least {INSTRUCTIONS[name]} argument(s)")
        rest = c.original.split(None, 1)[1] if " " in c.original else ""
        exec_form = name in ("CMD", "ENTRYPOINT", "RUN", "SHELL") and rest.lstrip()[:1] == "["
        if exec_form and not c.json:
            problems.append(f"{where}: {name} looks like an exec form but is not JSON")
        if name == "RUN" and not c.json:
            check = subprocess.run(["sh", "-n", "-c", c.value[0]], capture_output=True, text=True)
            if check.returncode:
                problems.append(f"{where}: RUN is not valid shell: {check.stderr.strip()}")
        if name == "COPY" and not any(fl.startswith("--from") for fl in c.flags):
            problems += [
                f"{where}: COPY source {src} does not exist"
                for src in c.value[:-1]
                if not (context / src).exists()
            ]
    return problems


def test_the_dockerfile_is_valid() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text(), ROOT) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FORM python:3.11\n", "unknown instruction"),
        ("FROM python:3.11\nCOPY nowhere /x\n", "does not exist"),
        ("FROM python:3.11\nRUN echo 'unterminated\n", "not valid shell"),
        ('FROM python:3.11\nCMD ["gradwatch", "serve"\n', "not JSON"),
        ("RUN true\n", "first instruction"),
        ("FROM python:3.11\nENV ONLY_A_NAME\n", "ENV must have two arguments"),
        ("FROM python:3.11\nWORKDIR\n", "at least 1"),
    ],
)
def test_the_dockerfile_check_catches_broken_recipes(text: str, problem: str) -> None:
    assert any(problem in p for p in dockerfile_problems(text, ROOT))


def test_the_image_installs_this_package_for_the_server_without_torch() -> None:
    commands = dockerfile.parse_file(str(DOCKERFILE))
    runs = " && ".join(c.value[0] for c in commands if c.cmd.upper() == "RUN")
    assert "pip install --no-deps ." in runs and "pip install -r /tmp/server-requirements" in runs
    assert not re.search(r"pip install[^&]*\btorch\b", runs), "the image must not install torch"
    # the recipe's own extraction of the requirements gives the [server] extra exactly
    script = re.search(r'python -c "(import tomllib.*?)" >', runs)
    assert script is not None
    out = subprocess.run(
        [sys.executable, "-c", script.group(1)],  # as sh passes it: \\n stays for Python
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert out == extras["optional-dependencies"]["server"]
    assert not any("torch" in r for r in out)
    final = [c for c in commands if c.cmd.upper() == "CMD"][-1]
    assert final.json and list(final.value[:2]) == ["gradwatch", "serve"]
    assert [c.value[0] for c in commands if c.cmd.upper() == "USER"] == ["gradwatch"]


def compose_schema() -> dict[str, Any]:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendor / "compose-spec.json").read_text())
    return schema


def test_the_compose_file_follows_the_compose_specification() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    jsonschema.validate(doc, compose_schema())
    services = doc["services"]
    assert set(services) == {"db", "server"}
    server, db = services["server"], services["db"]
    assert (COMPOSE.parent / server["build"]["context"] / server["build"]["dockerfile"]).is_file()
    assert server["depends_on"]["db"]["condition"] == "service_healthy" and db["healthcheck"]
    url = server["environment"]["GRADWATCH_DB"]
    assert re.fullmatch(r"postgresql://gradwatch:\$\{[^}]+\}@db:5432/gradwatch", url), url
    assert db["image"].startswith("postgres:")
    assert any(str(p).endswith(":8765") for p in server["ports"])


def test_the_compose_check_catches_a_broken_file() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    doc["services"]["server"]["depends_on"] = {"db": {"condition": "when_it_feels_like_it"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, compose_schema())


def test_the_server_runs_where_torch_cannot_be_imported(tmp_path: Path) -> None:
    blocker = tmp_path / "no-torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('torch is not in this image')\n")
    env = {
        **os.environ,
        "PYTHONPATH": f"{blocker.parent}{os.pathsep}{ROOT}",
        "GRADWATCH_DIR": str(tmp_path / "data"),
        "GRADWATCH_DB": f"sqlite:///{tmp_path / 'gw.db'}",
    }
    gw = [sys.executable, "-m", "gradwatch"]
    made = subprocess.run(
        [*gw, "serve", "--create-token", "p", "--scope", "write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.split()[-1]
    port = free_port()
    proc = subprocess.Popen(
        [*gw, "serve", "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(f"{base}/api/v1/health") or proc.poll() is not None, "serve")
        assert proc.poll() is None
        transport = HTTPTransport(base)
        body = b"".join(f.simple_run("no-torch", project="p"))
        headers = {**f.headers("no-torch"), "Authorization": f"Bearer {token}"}
        assert transport.post(INGEST_PATH, body, headers, 30).status == 200
        transport.close()
        assert [r["id"] for r in get(f"{base}/api/v1/runs")["data"]] == ["no-torch"]
        # cross-run comparison computes with torch: refused with what to install
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/api/v1/compare?a=no-torch&b=no-torch", timeout=30)
        assert refused.value.code == 503
        assert "needs torch" in refused.value.read().decode()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
    listed = subprocess.run(
        [*gw, "serve", "--list-tokens"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0 and " write " in listed.stdout, listed.stdout + listed.stderr
