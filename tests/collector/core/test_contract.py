"""The wire contract (gradwatch.core.contract): every record a real run writes has the keys its
kind's typed payload names, and the shared names are defined once."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradwatch
from gradwatch.core import contract
from gradwatch.core.spool import read_spool
from gradwatch.core.wire import Kind

ROOT = Path(__file__).resolve().parents[3]
PAYLOADS: dict[Kind, Any] = {
    Kind.RUN_START: contract.RunStartMeta,
    Kind.STEPS: contract.StepsMeta,
    Kind.SCALARS: contract.ScalarsMeta,
    Kind.FINDINGS: contract.FindingsMeta,
    Kind.HEARTBEAT: contract.HeartbeatMeta,
    Kind.END: contract.EndMeta,
    Kind.NOTICE: contract.NoticeMeta,
}


def test_a_real_run_writes_the_payloads_the_contract_names(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt, data_dir=tmp_path, project="contract") as run:
        for _ in range(5):
            opt.zero_grad()
            loss = model(torch.randn(16, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            run.log({"loss": loss})
    seen = set()
    for frame in read_spool(run.dir).frames:
        kind, meta = frame.record.kind, frame.record.meta
        seen.add(kind)
        if kind == Kind.FINGERPRINT:
            assert meta["phase"] in ("fast", "slow")
            continue
        payload = PAYLOADS[kind]
        assert (
            payload.__required_keys__
            <= set(meta)
            <= payload.__required_keys__ | (payload.__optional_keys__)
        ), kind
        if kind in (Kind.RUN_START, Kind.STEPS):
            assert tuple(meta["stats"]) == contract.STAT_NAMES
    assert {Kind.RUN_START, Kind.FINGERPRINT, Kind.STEPS, Kind.SCALARS, Kind.END} <= seen
    assert next(f for f in read_spool(run.dir).frames).record.meta["project"] == "contract"


def _assigned_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }


def test_shared_names_are_defined_once_in_the_contract() -> None:
    shared = {"STAT_NAMES", "SEVERITIES", "DEFAULT_PROJECT", "ROLES"}
    definers: dict[str, list[str]] = {name: [] for name in shared}
    for folder in ("collector", "server", "dashboard"):
        for path in (ROOT / folder).rglob("*.py"):
            for name in _assigned_names(path) & shared:
                definers[name].append(str(path.relative_to(ROOT)))
    assert definers == {name: ["collector/gradwatch/core/contract.py"] for name in shared}


def test_the_server_validates_against_the_contract() -> None:
    from gradwatch_server.ingest import frame_rows as records

    assert records.SEVERITIES is contract.SEVERITIES
    assert records.ROLES is contract.ROLES


def test_status_and_findings_read_the_same_everywhere() -> None:
    from gradwatch.core.contract import findings_words, status_words

    assert status_words("finished", {"error": 1, "warning": 2}) == "finished with errors"
    assert status_words("finished", {"warning": 2, "info": 5}) == "finished with warnings"
    assert status_words("finished", {"info": 5}) == "finished"
    assert status_words("crashed", {"error": 1}) == "crashed"
    assert findings_words({"error": 2, "warning": 1, "info": 3}) == "2 errors, 1 warning, 3 info"
    assert findings_words({"error": 0, "warning": 0, "info": 0}) == "ok"
