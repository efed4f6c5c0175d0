"""DDP: real 2-process jobs (torchrun, gloo, CPU) with ``watch()`` on every rank and under
``gradwatch run -- torchrun``; every rank's stream belongs to one run, and rank 0 reports
the cross-rank checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gradwatch.commands.findings import local_findings
from gradwatch.core.local_reader import list_runs, load_run

SCRIPT = Path(__file__).parents[1] / "scripts" / "ddp_train.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADWATCH_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _ranks(data_dir: Path) -> dict[int, dict[str, Any]]:
    """rank -> {"start": RUN_START meta, "findings": [...]} of the runs in ``data_dir``."""
    out: dict[int, dict[str, Any]] = {}
    for run_dir in list_runs(data_dir):
        run = load_run(run_dir)
        out[run.start["ddp"]["rank"]] = {
            "id": run.id,
            "start": run.start,
            "end": run.end,
            "findings": local_findings(run_dir),
        }
    return out


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torchrun job, four scenarios (one run each, every rank watched)."""
    root = tmp_path_factory.mktemp("ddp")
    done = subprocess.run(
        [*TORCHRUN, str(SCRIPT), str(root), "correct", "desync", "spread", "nan"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (root / "stderr.txt").write_text(done.stderr)
    return root


def test_every_rank_is_a_stream_of_one_run(job: Path) -> None:
    ranks = _ranks(job / "correct")
    assert sorted(ranks) == [0, 1]
    group = ranks[0]["id"]
    assert ranks[1]["id"] == f"{group}.rank1"
    for rank, run in ranks.items():
        ddp = run["start"]["ddp"]
        assert ddp["group"] == group and ddp["world_size"] == 2 and ddp["local_rank"] == rank
        assert ddp["host"]
        assert run["end"]["status"] == "finished"


def test_correct_ddp_training_has_no_findings(job: Path) -> None:
    for run in _ranks(job / "correct").values():
        assert run["findings"] == []
    assert "cross-rank" not in (job / "stderr.txt").read_text()


def test_silent_desync_on_one_rank_is_a_param_desync_on_rank_0(job: Path) -> None:
    ranks = _ranks(job / "desync")
    found = [f for f in ranks[0]["findings"] if f["check"] == "ddp-param-desync"]
    assert len(found) == 1  # one finding at the onset, not one per comparison
    f = found[0]
    assert f["severity"] == "error"
    assert f["step"] == 10  # rank 1 edited after step 6; compared at steps 1, 5, 10
    assert f["details"]["ranks"] == [1]
    assert f["details"]["tensors"]["1"] == ["module.0.weight"]
    assert not [f for f in ranks[1]["findings"] if f["check"].startswith("ddp-")]


def test_a_rank_with_a_much_larger_loss_is_a_rank_spread(job: Path) -> None:
    ranks = _ranks(job / "spread")
    found = [f for f in ranks[0]["findings"] if f["check"] == "ddp-rank-spread"]
    assert len(found) == 1  # persisting over the windows: one finding
    f = found[0]
    assert f["severity"] == "warning" and f["step"] == 5  # the first window: steps 1-5
    assert f["details"]["metric"] == "loss" and f["details"]["ratio"] > 100
    per_rank = f["details"]["per_rank"]
    assert per_rank["1"] > 100 * per_rank["0"]
    assert "rank 1" in f["message"]


def test_nan_on_one_rank_names_that_rank_and_host(job: Path) -> None:
    ranks = _ranks(job / "nan")
    found = [f for f in ranks[0]["findings"] if f["check"] == "ddp-nonfinite-rank"]
    assert len(found) == 1
    f = found[0]
    assert (f["step"], f["details"]["rank"], f["details"]["kind"]) == (8, 1, "loss")
    assert f["details"]["host"] == ranks[1]["start"]["ddp"]["host"]
    assert f["details"]["ranks"] == {
        "0": {"step": 8, "kind": "grad"},
        "1": {"step": 8, "kind": "loss"},
    }
    # each rank's own numerics checks see it too; the desync check does not misfire on NaN
    assert any(x["check"] == "nonfinite-loss" for x in ranks[1]["findings"])
    assert not [x for x in ranks[0]["findings"] if x["check"] == "ddp-param-desync"]


def test_gradwatch_run_through_torchrun(tmp_path: Path) -> None:
    """Zero-code: ``gradwatch run -- torchrun ...`` watches every rank of the job."""
    env = {**_env(), "GRADWATCH_DDP_EVERY": "5"}
    gradwatch_run = [sys.executable, "-m", "gradwatch", "run", "--project", "ddp"]
    done = subprocess.run(
        [*gradwatch_run, "--data-dir", str(tmp_path), "--", *TORCHRUN, str(SCRIPT), "-", "desync"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = _ranks(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert ranks[1]["start"]["ddp"]["group"] == ranks[0]["id"]
    assert ranks[0]["start"]["options"]["ddp_every"] == 5
    assert [f["check"] for f in ranks[0]["findings"]] == ["ddp-param-desync"]
    assert "ddp-param-desync" in done.stderr
    assert json.dumps(ranks[0]["start"]["project"]) == '"ddp"'
