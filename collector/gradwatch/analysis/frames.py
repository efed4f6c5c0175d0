"""DataFrames from the series, findings and lifecycle rows a source answers with.

One builder per table, shared by both sources: equal inputs give equal DataFrames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradwatch.analysis._deps import require
from gradwatch.analysis.selection import INCIDENT_KEYS, Series
from gradwatch.commands.findings import JSON_KEYS
from gradwatch.core.nonfinite import decode_float

if TYPE_CHECKING:
    from pandas import DataFrame

STAT_COLUMNS = {
    "grad_norm": "grad_norm",
    "param_norm": "param_norm",
    "update_norm": "update_norm",
    "nonfinite_grad": "nonfinite",
}
STEP_COLUMNS = {
    "loss": "loss",
    "has_loss": "has_loss",
    "n_backward": "n_backward",
    "wall_time": "step_time",
    "phases[0]": "forward_time",
    "phases[1]": "backward_time",
    "phases[2]": "optimizer_time",
    "batch[0]": "batch_sum",
    "batch[1]": "batch_weighted_sum",
}
LIFECYCLE_COLUMNS = ["step", "n_backward", "order", "event", "seconds", "detail"]


def _column(series: Series) -> str:
    """The steps-table column of a metric or scalar series (``lr[1]`` -> ``lr_1``)."""
    if series.kind == "scalar":
        taken = series.name in STEP_COLUMNS.values() or series.name.startswith("lr_")
        return f"scalar:{series.name}" if taken else series.name
    if series.name == "lr":
        return "lr_0"
    if series.name.startswith("lr["):
        return f"lr_{series.name[3:-1]}"
    return STEP_COLUMNS.get(series.name, series.name)


def _frame(columns: dict[str, Any], order: list[str]) -> DataFrame:
    """Series outer-joined on their steps, columns in ``order``, index ``step`` (int64)."""
    pd = require("pandas")
    frame: DataFrame = (
        pd.DataFrame(columns, columns=order) if columns else pd.DataFrame(columns=order)
    ).sort_index()
    frame.index = pd.Index(frame.index.to_numpy(dtype="int64"), name="step")
    # flags and counts keep their type unless a missing value (outer join) forces float
    dtypes = {"has_loss": "bool", "n_backward": "int64", "has_grad": "bool"}
    exact = {k: v for k, v in dtypes.items() if k in frame and not frame[k].isna().any()}
    return frame.astype(exact)


def steps_frame(series: list[Series]) -> DataFrame:
    """Per-step metrics and user scalars, indexed by step."""
    pd = require("pandas")
    columns = {_column(s): _last_per_step(pd.Series(s.values, index=s.steps)) for s in series}
    fixed = [c for c in STEP_COLUMNS.values() if c in columns]
    lrs = sorted((c for c in columns if c.startswith("lr_")), key=lambda c: int(c[3:]))
    rest = [c for c in columns if c not in fixed and c not in lrs]
    return _frame(columns, fixed[:2] + lrs + fixed[2:] + rest)


def _last_per_step(values: Any) -> Any:
    """A series with one value per step: a key logged twice in a step keeps the last."""
    return values[~values.index.duplicated(keep="last")].astype("float64")


def tensors_frame(series: list[Series], names: list[str]) -> DataFrame:
    """Long format: one row per (step, tensor) with the four statistics and ``has_grad``;
    ``names`` are the optimizer's tensors in statistics-row order."""
    pd = require("pandas")
    by_tensor: dict[str, dict[str, Any]] = {name: {} for name in names}
    for s in series:
        if s.kind == "tensor" and s.name in by_tensor and s.stat in STAT_COLUMNS:
            by_tensor[s.name][STAT_COLUMNS[s.stat]] = pd.Series(s.values, index=s.steps)
        elif s.name == "has_grad" and len(names) == 1:
            by_tensor[names[0]]["has_grad"] = pd.Series(s.values, index=s.steps)
        elif s.name.startswith("has_grad[") and int(s.name[9:-1]) < len(names):
            by_tensor[names[int(s.name[9:-1])]]["has_grad"] = pd.Series(s.values, index=s.steps)
    order = [*STAT_COLUMNS.values(), "has_grad"]
    parts = []
    for rank, name in enumerate(names):
        part = _frame(by_tensor[name], order).reset_index()
        part.insert(1, "tensor", name)
        part["_rank"] = rank
        parts.append(part)
    if not parts:
        parts = [pd.DataFrame(columns=["step", "tensor", *order, "_rank"])]
    out: DataFrame = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["step", "_rank"], kind="stable").drop(columns="_rank")
    return out.reset_index(drop=True)


def pivot(tensors: DataFrame, stat: str = "grad_norm") -> DataFrame:
    """One statistic of a ``tensors`` table as steps × tensors (tensors in model order)."""
    if stat not in tensors:
        raise KeyError(f"no statistic {stat!r}; the tensors table has {list(tensors.columns)[2:]}")
    order = list(dict.fromkeys(tensors["tensor"]))
    table = tensors.pivot(index="step", columns="tensor", values=stat)
    return table[order]


def findings_frame(findings: list[dict[str, Any]]) -> DataFrame:
    """The ``gradwatch findings --json`` columns (plus ``incident``/``role`` when the
    findings carry them), ordered by step as the server orders them (no step first)."""
    pd = require("pandas")
    extra = [
        k
        for k in INCIDENT_KEYS
        if k not in JSON_KEYS and any(f.get(k) is not None for f in findings)
    ]
    columns = [*JSON_KEYS, *extra]
    frame: DataFrame = pd.DataFrame(
        [{k: f.get(k) for k in columns} for f in findings], columns=columns
    )
    frame["step"] = frame["step"].astype("Int64")
    frame = frame.sort_values("step", kind="stable", na_position="first")
    return frame.reset_index(drop=True)


def lifecycle_frame(rows: list[dict[str, Any]]) -> DataFrame:
    """One row per lifecycle event: its step, order in the step, kind, seconds since the
    previous step ended, detail; with the step's backward count."""
    pd = require("pandas")
    records = [
        (
            r["step"],
            r["n_backward"],
            i,
            str(e[0]),
            decode_float(e[1]),
            str(e[2]) if len(e) > 2 else "",
        )
        for r in rows
        for i, e in enumerate(r["events"])
    ]
    frame: DataFrame = pd.DataFrame.from_records(records, columns=LIFECYCLE_COLUMNS)
    return frame.astype({"step": "int64", "order": "int64", "seconds": "float64"})


def runs_frame(runs: list[dict[str, Any]]) -> DataFrame:
    """The ``gradwatch runs --json`` fields, one row per run, plus ``errors`` and
    ``warnings`` counted from ``findings``."""
    pd = require("pandas")
    frame: DataFrame = pd.DataFrame(runs)
    if frame.empty:
        return frame.reindex(columns=["id", "project", "name", "status", "steps", "errors"])
    frame["errors"] = [int(f.get("error", 0)) for f in frame["findings"]]
    frame["warnings"] = [int(f.get("warning", 0)) for f in frame["findings"]]
    return frame
