"""``gradwatch.open_run`` on the local spool: every table against an independent decode of
the same spool (:mod:`gradwatch.core.local_reader`) and against
``gradwatch findings --json``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gradwatch
from gradwatch.cli import main
from gradwatch.core.local_reader import load_run
from tests.collector.analysis.recorded import BAD_STEP, STEPS, train
from tests.server.training import make
from tests.server.training import train as plain_train


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bad run, recorded once for this module (its folder)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADWATCH_DIR", str(tmp_path_factory.mktemp("analysis-data")))
        return Path(train(bad=True).dir)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_steps_hold_every_step_as_recorded(bad_run: Path) -> None:
    rows = load_run(bad_run).steps[0]
    steps = gradwatch.open_run(bad_run).steps
    assert steps.index.tolist() == [r.step for r in rows] == list(range(1, STEPS + 1))
    for r in rows:
        got = steps.loc[r.step]
        assert _same(got.loss, r.loss if r.loss is not None else math.nan)
        assert [got.lr_0, got.lr_1] == r.lr == [0.05, 0.1]
        assert (got.n_backward, got.step_time) == (r.n_backward, r.wall_time)
        assert [got.forward_time, got.backward_time, got.optimizer_time] == r.phases
    scalars = load_run(bad_run).scalars
    assert [(s, v) for s, k, v in scalars if k == "accuracy"] == list(steps.accuracy.items())
    spikes = {s: v for s, k, v in scalars if k == "spike"}
    assert all(_same(steps.spike[s], v) for s, v in spikes.items()) and len(spikes) == 4
    assert steps.dtypes["n_backward"] == np.int64 and steps.dtypes["has_loss"] == np.bool_


def test_tensors_are_the_statistics_in_long_format(bad_run: Path) -> None:
    local = load_run(bad_run)
    data = gradwatch.open_run(bad_run)
    tensors = data.tensors
    assert list(tensors.columns) == [
        "step", "tensor", "grad_norm", "param_norm", "update_norm", "nonfinite", "has_grad",
    ]  # fmt: skip
    assert len(tensors) == STEPS * len(local.tensor_names)
    for row in local.steps[0]:
        got = tensors[tensors.step == row.step]
        assert got.tensor.tolist() == local.tensor_names
        expected = np.array(row.stats)
        assert np.array_equal(got.iloc[:, 2:6].to_numpy(), expected, equal_nan=True)
        assert got.has_grad.tolist() == row.has_grad
    table = data.pivot("nonfinite")
    assert list(table.columns) == local.tensor_names and (table.loc[BAD_STEP] > 0).all()
    with pytest.raises(KeyError, match="no statistic 'norm'"):
        data.pivot("norm")


def test_findings_have_the_findings_json_columns(
    bad_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["findings", str(bad_run), "--json"])
    cli = json.loads(capsys.readouterr().out)
    findings = gradwatch.open_run(bad_run).findings
    assert list(findings.columns) == list(cli[0])
    assert [f["check"] for f in cli] == findings.check.tolist()
    assert {"nonfinite-loss", "nonfinite-grad"} <= set(findings.check)
    assert (findings.step == BAD_STEP).all() and findings.details[0]["loss"] == math.inf


def test_lifecycle_lists_each_event_of_each_step(bad_run: Path) -> None:
    rows = load_run(bad_run).steps[0]
    life = gradwatch.open_run(bad_run).read_lifecycle(steps=slice(3, 5))
    expected = [
        (r.step, r.n_backward, i, kind, t, detail)
        for r in rows
        if 3 <= r.step <= 5
        for i, (kind, t, detail) in enumerate(r.events)
    ]
    assert list(life.itertuples(index=False, name=None)) == expected
    assert "backward" in set(life.event) and "step" in set(life.event)


def test_a_step_range_is_inclusive_and_points_downsample(bad_run: Path) -> None:
    data = gradwatch.open_run(bad_run)
    part = data.read_steps(steps=slice(10, 20))
    pd.testing.assert_frame_equal(part, data.steps.loc[10:20])
    thin = data.read_tensors(points=4)
    assert thin.step.nunique() < STEPS and set(range(BAD_STEP, STEPS + 1)) <= set(thin.step)


def test_bad_arguments_are_clear_errors(bad_run: Path) -> None:
    data = gradwatch.open_run(bad_run)
    with pytest.raises(TypeError, match="slice"):
        data.read_steps(steps=slice(1, 9, 2))
    with pytest.raises(TypeError, match="integer step numbers"):
        data.read_steps(steps=slice(1.5, 9))
    with pytest.raises(ValueError, match="at least 2"):
        data.read_steps(points=1)
    with pytest.raises(LookupError, match="no run 'nope'"):
        gradwatch.open_run("nope", data_dir=bad_run.parent.parent)
    with pytest.raises(TypeError, match="unknown filter"):
        gradwatch.runs(colour="red")


def test_runs_lists_the_data_directory_with_filters(tmp_path: Path) -> None:
    bad, good = train(bad=True), train(bad=False, project="other")
    listed = gradwatch.runs()
    assert set(listed.id) == {bad.id, good.id}
    assert listed.set_index("id").errors.to_dict() == {bad.id: 3, good.id: 0}
    assert gradwatch.runs("other").id.tolist() == [good.id]
    assert gradwatch.runs(status="finished").id.tolist() == listed.id.tolist()
    assert gradwatch.runs(status="failed").empty


def test_without_pandas_the_error_names_the_extra(bad_run: Path) -> None:
    code = (
        "import sys; sys.modules['pandas'] = None; import gradwatch\n"
        f"try:\n    gradwatch.open_run({str(bad_run)!r})\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "needs pandas" in out.stdout and "pip install 'gradwatch[analysis]'" in out.stdout


def test_a_key_logged_twice_in_a_step_keeps_the_last_value() -> None:
    model, opt = make()
    with gradwatch.watch(model, opt) as run:
        for i in range(5):
            run.log({"micro": float(i)})
            plain_train(run, model, opt, 1)
            run.log({"micro": i + 0.5})
    steps = gradwatch.open_run(run.dir).steps
    # step i gets i - 0.5 (after step i) then i (before step i + 1): the last is i
    assert steps.micro.to_dict() == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 4.5}
    assert steps.loc[1:].index.tolist() == [1, 2, 3, 4, 5] and steps.index.is_unique


def test_findings_that_carry_incidents_get_incident_and_role_columns() -> None:
    """A collector that groups findings into incidents writes ``incident`` and ``role`` on
    each finding; the table shows them (the columns are there even when a run has none)."""
    from gradwatch.core.spool import SpoolWriter
    from gradwatch.core.wire import Kind, Record

    model, opt = make()
    with gradwatch.watch(model, opt) as run:
        plain_train(run, model, opt, 3)
    assert {"incident", "role"} <= set(gradwatch.open_run(run.dir).findings.columns)
    base = {"severity": "error", "step": 3, "hint": "", "details": {}, "source": "runtime"}
    findings = [
        {**base, "check": "nonfinite-loss", "message": "the loss is nan.", "incident": 1,
         "role": "root"},
        {**base, "check": "nonfinite-grad", "message": "grads.", "incident": 1, "role": "effect"},
    ]  # fmt: skip
    writer = SpoolWriter(run.dir)
    writer.append(Record(Kind.FINDINGS, {"findings": findings}))
    writer.close()
    table = gradwatch.open_run(run.dir).findings
    assert table[["check", "incident", "role"]].values.tolist() == [
        ["nonfinite-loss", 1, "root"],
        ["nonfinite-grad", 1, "effect"],
    ]
