"""``gradwatch.open_run`` / ``gradwatch.runs`` read the same recorded runs from the local
spool and from a real server over loopback HTTP, and get equal DataFrames (NaN/±Inf
included), with and without a step range and server-side downsampling."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pandas as pd
import pytest

import gradwatch
from gradwatch.analysis.selection import Selection
from gradwatch_server.settings import Settings
from tests.collector.analysis.recorded import BAD_STEP, STEPS, train
from tests.server.live import live_server, wait_for


def _frames(url: str, run_id: str) -> int:
    with urllib.request.urlopen(f"{url}/api/v1/runs/{run_id}", timeout=30) as reply:
        detail: dict[str, Any] = json.loads(reply.read())
    return int(detail["frames"])


def _stored(url: str, run: gradwatch.Run) -> None:
    """Wait until the server holds every frame the run spooled."""
    from gradwatch.core.spool import read_spool

    spooled = len(read_spool(run.dir).frames)
    wait_for(lambda: _frames(url, run.id) == spooled, f"the server to store run {run.id}")


def _tables(run: gradwatch.analysis.RunData) -> dict[str, Any]:
    return {
        "steps": run.steps,
        "tensors": run.tensors,
        "findings": run.findings,
        "lifecycle": run.lifecycle,
        "range": run.read_steps(steps=slice(10, BAD_STEP + 2)),
        "thinned": run.read_steps(points=8),
        "thinned tensors": run.read_tensors(steps=slice(5, None), points=6),
        "pivot": run.pivot("update_norm"),
    }


def test_local_and_server_reads_give_equal_dataframes(settings: Settings) -> None:
    with live_server(settings) as url:
        bad = train(bad=True, server=url)
        good = train(bad=False, server=url)
        for run in (bad, good):
            _stored(url, run)
        for run in (bad, good):
            local = gradwatch.open_run(run.id)
            remote = gradwatch.open_run(run.id, server=url)
            assert remote.source.where.startswith(url)
            for name, table in _tables(local).items():
                other = _tables(remote)[name]
                pd.testing.assert_frame_equal(table, other, obj=f"{name} of {run.id}")
            assert local.fingerprint == remote.fingerprint
            assert local.info["start"] == remote.info["start"]
            assert (local.status, remote.status) == ("finished", "finished")
        listed_local = gradwatch.runs("analysis")
        listed_remote = gradwatch.runs("analysis", server=url)
    columns = ["id", "project", "name", "status", "steps", "errors", "config_hash", "group"]
    pd.testing.assert_frame_equal(listed_local[columns], listed_remote[columns])
    assert set(listed_remote["id"]) == {bad.id, good.id}
    assert listed_remote.set_index("id")["errors"][bad.id] > 0


def test_the_compared_tables_hold_nan_and_both_infinities(settings: Settings) -> None:
    """The equality above is not vacuous: the recorded values include NaN, +Inf and -Inf
    in the loss, the statistics and the user scalars, and they read back bit for bit."""
    with live_server(settings) as url:
        run = train(bad=True, server=url)
        _stored(url, run)
        steps = gradwatch.open_run(run.id, server=url).steps
        tensors = gradwatch.open_run(run.id, server=url).tensors
    assert steps.loss[BAD_STEP] == math.inf and steps.loss.iloc[-1] != steps.loss.iloc[-1]
    spike = steps.spike
    assert {math.inf, -math.inf} <= set(spike[np.isinf(spike)])
    assert math.copysign(1.0, spike[34]) == -1.0 and spike[34] == 0.0  # -0.0 kept
    assert tensors[tensors.step == BAD_STEP].nonfinite.gt(0).all()
    assert tensors.grad_norm.isna().any() and len(steps) == STEPS


def test_server_side_downsampling_keeps_every_nonfinite_point(settings: Settings) -> None:
    with live_server(settings) as url:
        run = train(bad=True, server=url)
        _stored(url, run)
        remote = gradwatch.open_run(run.id, server=url)
        (loss,) = remote.source.series(Selection(metrics=["loss"], points=4))
        full = remote.steps.loss
    nonfinite = full.index[~np.isfinite(full)].tolist()
    assert nonfinite == list(range(BAD_STEP, STEPS + 1))
    assert set(nonfinite) <= set(loss.steps.tolist()) and len(loss.steps) < STEPS
    assert np.array_equal(loss.values, full[loss.steps].to_numpy(), equal_nan=True)


def test_a_run_missing_on_the_server_is_a_lookup_error(settings: Settings) -> None:
    with live_server(settings) as url:
        for table in ("steps", "tensors", "findings"):
            with pytest.raises(LookupError, match="no run 'nope'"):
                getattr(gradwatch.open_run("nope", server=url), table)


def test_the_scalars_route_lists_logged_keys_in_first_logged_order(settings: Settings) -> None:
    with live_server(settings) as url:
        run = train(bad=False, server=url)
        _stored(url, run)
        with urllib.request.urlopen(f"{url}/api/v1/runs/{run.id}/scalars", timeout=30) as r:
            keys = json.loads(r.read())
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{url}/api/v1/runs/nope/scalars", timeout=30)
        missing.value.close()
    assert keys == {"data": ["accuracy", "spike"], "count": 2}
    assert missing.value.code == 404
