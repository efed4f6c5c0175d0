"""The public surface and the import-weight promise of the collector."""

from __future__ import annotations

import json
import subprocess
import sys

import gradwatch

HEAVY = [
    "fastapi",
    "sqlmodel",
    "sqlalchemy",
    "dash",
    "plotly",
    "pandas",
    "starlette",
    "requests",
    "httpx",
    "uvicorn",
]


def test_all_is_sorted_and_complete() -> None:
    assert gradwatch.__all__ == sorted(gradwatch.__all__)
    public = {n for n in dir(gradwatch) if not n.startswith("_")} - {
        # submodules are importable, not part of the flat surface
        n
        for n in dir(gradwatch)
        if type(getattr(gradwatch, n)).__name__ == "module"
    }
    assert public | {"__version__"} == set(gradwatch.__all__)


def test_import_gradwatch_loads_no_web_or_dataframe_stack() -> None:
    # the analysis API is reachable from the package (open_run, runs) without loading
    # pandas: only a call does; so is the export command's parser
    code = (
        "import sys, json, gradwatch, gradwatch.cli; "
        "gradwatch.open_run, gradwatch.runs, gradwatch.cli.build_parser(); "
        "print(json.dumps(sorted(m for m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert heavy == []


def test_version_is_a_string() -> None:
    assert isinstance(gradwatch.__version__, str) and gradwatch.__version__.count(".") == 2
