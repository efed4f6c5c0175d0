"""examples/analysis.ipynb runs top to bottom in a real Jupyter kernel (nbclient): it
trains its three runs, finds the bad one, plots the tensor that went non-finite and
compares the replicates."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).parents[3] / "examples" / "analysis.ipynb"


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")


@pytest.mark.slow
def test_the_example_notebook_executes_and_finds_the_bad_run(data_dir: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")
    # the kernel inherits GRADWATCH_DIR (the test's data directory) from the environment
    NotebookClient(notebook, timeout=240, kernel_name="python3").execute()
    printed = "".join(_text(c) for c in notebook.cells if c.cell_type == "code")
    assert "bad run: " in printed
    assert "first non-finite gradient: 0.weight at step 6" in printed
    assert "largest loss difference between the replicates: 0\n" in printed
    assert "same batches at every step: True" in printed
    assert "fingerprint keys that differ: []" in printed
    shown = [o for c in notebook.cells for o in c.get("outputs", []) if "data" in o]
    assert any("plotly-graph-div" in o["data"].get("text/html", "") for o in shown)
    assert any("application/vnd.plotly.v1+json" in o["data"] for o in shown)
    assert len(list((data_dir / "runs").iterdir())) == 3
