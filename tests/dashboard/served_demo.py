"""The demo's runs as ``gradwatch demo`` leaves them: in a data directory whose database
holds the demo's alert rule, watched by a live server until its cross-run checks (the
drifting run's ``repro-drift``) and the alerts are in."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from gradwatch.commands.demo import alert_rule
from gradwatch_dashboard.api_client import Api
from gradwatch_server.settings import default_db_url
from tests.dashboard.conftest import serve
from tests.server.live import wait_for


def alerted(api: Api) -> set[str]:
    """The names of the runs with an alert."""
    names = {r["id"]: r["name"] for r in api.get("/runs")["data"]}
    return {names[a["run"]] for a in api.get("/alerts", project="demo")["data"]}


def watched_demo(demo_dir: Path, root: Path) -> Iterator[str]:
    """Copy the demo's spools to ``root``, add the demo's alert rule (twice: it stays one),
    and serve them; yields the server's URL once the drift finding and alerts exist."""
    shutil.copytree(demo_dir, root, ignore=shutil.ignore_patterns("gradwatch.db*"))
    assert alert_rule(default_db_url(root)) and alert_rule(default_db_url(root))
    for url in serve(root / "gradwatch.db", root):
        api = Api(url)
        wait_for(lambda a=api: {"drifting", "nan-onset"} <= alerted(a), "the demo's alerts", 120)
        yield url
