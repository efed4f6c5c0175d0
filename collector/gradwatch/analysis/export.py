"""The steps, tensors and findings tables of a run as CSV, Parquet or JSON Lines files,
and reading them back exactly (NaN and ±Inf included).

CSV writes non-finite floats as ``NaN``, ``inf`` and ``-inf`` (what pandas reads back);
JSON Lines writes them as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (strict
JSON, as the server's API does); a finding's ``details`` and ``confirmed_by`` are JSON text
in every format.

CSV files are safe to open in a spreadsheet: a text cell (or column name) that a
spreadsheet would run as a formula — one starting with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return, e.g. a run logging a scalar named ``=HYPERLINK(...)`` — is written
with a leading ``'``, which spreadsheets read as "text follows". Numbers are untouched
(``-1.5``, ``-inf``, ``1e-3``, ``NaN``), as is text that is a plain number. A text cell that
already starts with ``'`` before such a character gets one more, so ``read_table`` gives
back exactly what was exported by taking one ``'`` off.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradwatch.analysis._deps import require
from gradwatch.core.nonfinite import NAMES, decode_floats, encode_floats

if TYPE_CHECKING:
    from pandas import DataFrame

    from gradwatch.analysis.rundata import RunData

FORMATS = {"csv": "csv", "parquet": "parquet", "jsonl": "jsonl"}
TABLES = ("steps", "tensors", "findings")
JSON_COLUMNS = ("details", "confirmed_by")  # dict-valued finding columns, stored as JSON text
#: text a spreadsheet would run as a formula (after any quotes this module added)
_FORMULA = re.compile(r"'*[=+\-@\t\r]")
#: text that is a number as Python writes one (a spreadsheet reads it as that number)
_NUMBER = re.compile(
    r"-?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)\Z", re.IGNORECASE
)


def neutralise(text: str) -> str:
    """``text`` as a spreadsheet shows it and never runs it (see the module docstring)."""
    if _FORMULA.match(text) and not _NUMBER.match(text):
        return "'" + text
    return text


def restore(text: str) -> str:
    """The text that :func:`neutralise` was given."""
    if text.startswith("'") and _FORMULA.match(text) and not _NUMBER.match(text[1:]):
        return text[1:]
    return text


def spreadsheet_safe(frame: DataFrame) -> DataFrame:
    """A copy of ``frame`` with every text cell and column name neutralised."""
    out = frame.rename(columns=lambda c: neutralise(c) if isinstance(c, str) else c)
    for column in out.columns:
        if out[column].dtype == object or str(out[column].dtype) in ("string", "str"):
            out[column] = [neutralise(v) if isinstance(v, str) else v for v in out[column]]
    return out


def tables(run: RunData) -> dict[str, DataFrame]:
    """The three tables as flat DataFrames (the steps index becomes its ``step`` column)."""
    findings = run.findings.copy()
    for column in JSON_COLUMNS:
        findings[column] = [
            None if v is None else json.dumps(encode_floats(v), allow_nan=False)
            for v in findings[column]
        ]
    return {"steps": run.steps.reset_index(), "tensors": run.tensors, "findings": findings}


def check_format(fmt: str) -> None:
    """``ValueError`` for an unknown format; ``ImportError`` when parquet lacks pyarrow."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        require("pyarrow", "--format parquet (or use csv or jsonl)")


def write_tables(run: RunData, fmt: str, out: Path) -> list[Path]:
    """Write ``steps``, ``tensors`` and ``findings`` into ``out``; returns the paths."""
    check_format(fmt)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in tables(run).items():
        path = out / f"{name}.{FORMATS[fmt]}"
        if fmt == "csv":
            spreadsheet_safe(frame).to_csv(path, index=False, na_rep="NaN")
        elif fmt == "parquet":
            frame.to_parquet(path, index=False)
        else:
            _write_jsonl(frame, path)
        written.append(path)
    return written


def _write_jsonl(frame: DataFrame, path: Path) -> None:
    """Float columns keep NaN (as ``"NaN"``); a missing value elsewhere is ``null``."""
    floats = set(frame.select_dtypes("float").columns)
    with path.open("w", encoding="utf-8") as f:
        for row in frame.to_dict("records"):
            clean = {k: v if k in floats or not _is_na(v) else None for k, v in row.items()}
            f.write(json.dumps(encode_floats(clean), allow_nan=False) + "\n")


def _is_na(value: Any) -> bool:
    pd = require("pandas")
    return bool(value is None or (not isinstance(value, list | dict) and pd.isna(value)))


def read_table(path: str | Path) -> DataFrame:
    """An exported table read back with the dtypes it was written with: ``steps`` indexed
    by step, dict columns of ``findings`` parsed from their JSON text."""
    pd = require("pandas")
    path = Path(path)
    name, fmt = path.stem, path.suffix.lstrip(".")
    if fmt == "csv":
        # pandas 3 parses floats exactly by default (and deprecates asking); pandas 2 must ask
        exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
        frame = pd.read_csv(path, keep_default_na=False, na_values=["NaN"], **exact)
        frame = frame.rename(columns=restore)
        for column in frame.columns:
            if frame[column].dtype == object or str(frame[column].dtype) in ("string", "str"):
                frame[column] = [restore(v) if isinstance(v, str) else v for v in frame[column]]
    elif fmt == "parquet":
        frame = pd.read_parquet(path)
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        frame = _numeric(pd.DataFrame(rows))
    else:
        raise ValueError(f"{path} is not an export (.csv, .parquet or .jsonl)")
    if name == "findings":
        frame["step"] = frame["step"].astype("Int64")
        # an all-None column reads back as float NaN from CSV: None, as the reader gives it
        confirmed = frame["confirmed"].astype(object)
        frame["confirmed"] = confirmed.where(confirmed.notna(), None)
        for column in JSON_COLUMNS:
            frame[column] = [
                decode_floats(json.loads(v)) if isinstance(v, str) else None for v in frame[column]
            ]
    out: DataFrame = frame.set_index("step") if name == "steps" else frame
    return out


def _numeric(frame: DataFrame) -> DataFrame:
    """JSON columns of numbers with ``"NaN"``/``"Infinity"`` strings back to float64."""
    for column in frame.columns:
        values = frame[column].tolist()
        named = [v for v in values if isinstance(v, str)]
        if (
            named
            and all(v in NAMES for v in named)
            and all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in values)
        ):
            frame[column] = [NAMES.get(v, v) if isinstance(v, str) else float(v) for v in values]
    return frame
