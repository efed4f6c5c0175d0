"""How a run shows itself: plain text in a terminal, compact HTML in a notebook.

The HTML holds the status, the step count, the findings in words (one line per incident
when the findings carry incidents), a small loss plot and a gradient-norm heatmap drawn
with Plotly. It needs no server; Plotly's script is loaded from its CDN (set
``PLOTLY_JS = True`` to embed it, about 4 MB per run shown, for offline notebooks).
A display never raises: what cannot be drawn is replaced by a one-line note.
"""

from __future__ import annotations

import html as html_lib
import math
from typing import TYPE_CHECKING, Any

from gradwatch.analysis._deps import require

if TYPE_CHECKING:
    from pandas import DataFrame

    from gradwatch.analysis.rundata import RunData
    from gradwatch.session.handle import Run

PLOTLY_JS: bool | str = "cdn"
MAX_LINES = 5  # findings shown in words; the rest are counted
HEATMAP_COLUMNS = 200  # step buckets of the heatmap (each shows its bucket's maximum)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def finding_lines(findings: list[dict[str, Any]]) -> list[str]:
    """The findings in words: one line per incident (:mod:`gradwatch.core.incidents`: its root
    cause, then what followed), errors and warnings only."""
    from gradwatch.core.incidents import views

    clean = [{k: None if _missing(v) else v for k, v in f.items()} for f in findings]
    lines = [
        f"{view.severity} {view.sentence()}" for view in views(clean) if view.severity != "info"
    ]
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], f"… and {len(lines) - MAX_LINES:,} more"]
    return lines


def _missing(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _counts(findings: list[dict[str, Any]]) -> str:
    severities = [str(f.get("severity")) for f in findings]
    parts = [_plural(severities.count(s), s) for s in ("error", "warning") if s in severities]
    return ", ".join(parts) or "no errors or warnings"


def summary(header: str, findings: list[dict[str, Any]]) -> list[str]:
    """The header line, the finding counts, then the findings in words."""
    return [
        header,
        f"findings: {_counts(findings)}",
        *("  " + line for line in finding_lines(findings)),
    ]


def _header(info: dict[str, Any], tensors: int) -> str:
    return (
        f"gradwatch run {info['id']} (project {info['project']}): {info['status']}, "
        f"{_plural(int(info['steps']), 'step')}, {_plural(tensors, 'tensor')}"
    )


def _records(run: RunData) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in row.items()} for row in run.findings.to_dict("records")]


def text(run: RunData) -> str:
    """A few plain lines: status, steps, findings in words."""
    try:
        return "\n".join(summary(_header(run.info, len(run.tensor_names())), _records(run)))
    except Exception as exc:  # a repr must not raise, whatever the source answered
        return f"<gradwatch run {run.id} from {run.source.where}: cannot be read ({exc})>"


def live_text(run: Run) -> str:
    """The live :class:`gradwatch.Run` in words, from memory (no spool read)."""
    findings = [f.to_meta() | _incident(f) for f in run.findings]
    header = (
        f"<gradwatch.Run {run.id} project={run.context.options.project!r} step={run.step} "
        f"status={run.status}>"
    )
    return "\n".join(summary(header, findings)) if findings else header


def _incident(finding: Any) -> dict[str, Any]:
    return {k: getattr(finding, k) for k in ("incident", "role") if hasattr(finding, k)}


def html(run: RunData, status: str | None = None) -> str:
    """A compact HTML summary with a loss plot and a gradient-norm heatmap."""
    try:
        info = run.info | ({"status": status} if status else {})
        lines = summary(_header(info, len(run.tensor_names())), _records(run))
    except Exception as exc:  # the notebook shows the reason instead of a traceback
        return f"<pre>{html_lib.escape(text(run))}\n{html_lib.escape(str(exc))}</pre>"
    head = f"<b>{html_lib.escape(lines[0])}</b><br>{html_lib.escape(lines[1])}"
    items = "".join(f"<li>{html_lib.escape(line.strip())}</li>" for line in lines[2:])
    return f"<div>{head}<ul>{items}</ul>{_plots(run)}</div>"


def live_html(run: Run) -> str:
    """The live run's summary, read from its spool as far as it is written."""
    from gradwatch.analysis.api import open_run

    try:
        return html(open_run(run.dir), status=run.status)
    except Exception as exc:
        return f"<pre>{html_lib.escape(live_text(run))}\n{html_lib.escape(str(exc))}</pre>"


def _plots(run: RunData) -> str:
    try:
        go = require("plotly.graph_objects", "the notebook display")
        require("pandas", "the notebook display")
        loss = run.steps["loss"].dropna() if "loss" in run.steps else None
        grid = heatmap_grid(run.pivot("grad_norm")) if run.tensor_names() else None
    except Exception as exc:
        return f"<p>(no plots: {html_lib.escape(str(exc))})</p>"
    figures = []
    if loss is not None and len(loss):
        fig = go.Figure(go.Scatter(x=loss.index, y=loss.values, mode="lines", name="loss"))
        figures.append(_figure(fig, "loss"))
    if grid is not None and grid.size:
        fig = go.Figure(
            go.Heatmap(
                z=grid.T.to_numpy(),
                x=grid.index,
                y=list(grid.columns),
                colorscale="Viridis",
                colorbar={"title": "log10"},
            )
        )
        figures.append(_figure(fig, "gradient norm (log10, max per step bucket)"))
    return "".join(f'<div style="display:inline-block;width:49%">{f}</div>' for f in figures)


def _figure(fig: Any, title: str) -> str:
    fig.update_layout(
        title={"text": title, "font": {"size": 12}},
        height=260,
        margin={"l": 40, "r": 10, "t": 30, "b": 30},
    )
    return str(fig.to_html(full_html=False, include_plotlyjs=PLOTLY_JS))


def heatmap_grid(table: DataFrame) -> DataFrame:
    """log10 of a steps × tensors table, reduced to at most 200 step buckets (the
    maximum of each); a bucket with no positive finite value is a gap."""
    np = require("numpy")
    if len(table) > HEATMAP_COLUMNS:
        width = -(-len(table) // HEATMAP_COLUMNS)
        buckets = np.arange(len(table)) // width
        table = table.groupby(buckets).max().set_axis(table.index[::width])
    with np.errstate(divide="ignore", invalid="ignore"):
        logs: DataFrame = np.log10(table.where(table > 0))
    return logs
