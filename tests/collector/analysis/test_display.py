"""How runs show themselves: plain text and compact notebook HTML, read back or live."""

from __future__ import annotations

import html
import re
import socket

import pytest

import gradwatch
from gradwatch.analysis import display
from tests.collector.analysis.recorded import BAD_STEP, train
from tests.server.training import make
from tests.server.training import train as plain_train


def test_a_recorded_run_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    run = gradwatch.open_run(train(bad=True).dir)
    text = repr(run)
    lines = text.splitlines()
    assert lines[0] == (f"gradwatch run {run.id} (project analysis): finished, 40 steps, 4 tensors")
    assert lines[1] == "findings: 3 errors"
    # one line per incident: its root cause (here NaN provenance's), then what followed
    assert lines[2].startswith(f"  error First non-finite value at step {BAD_STEP}:")
    assert lines[2].endswith(f"then nonfinite-grad at step {BAD_STEP}, nonfinite-param at step 30.")
    good = gradwatch.open_run(train(bad=False).dir)
    assert repr(good).splitlines()[1] == "findings: no errors or warnings"


def test_the_notebook_html_has_the_words_a_loss_plot_and_a_heatmap() -> None:
    run = gradwatch.open_run(train(bad=True).dir)
    page = run._repr_html_()
    assert html.escape("then nonfinite-grad at step 30, nonfinite-param at step 30.") in page
    assert page.count('class="plotly-graph-div"') == 2
    assert '"type":"heatmap"' in page and '"type":"scatter"' in page
    assert "<b>gradwatch run" in page and "finished" in page


def test_incidents_are_one_line_each() -> None:
    findings = [
        {"check": "nonfinite-loss", "severity": "error", "step": 5, "message": "the loss is nan."},
        {"check": "nonfinite-grad", "severity": "error", "step": 5, "message": "grads."},
        {"check": "lr-jump", "severity": "warning", "step": 90, "message": "lr jumped."},
    ]
    assert display.finding_lines(findings) == [
        "error nonfinite-loss at step 5: the loss is nan; then nonfinite-grad at step 5.",
        "warning lr-jump at step 90: lr jumped.",
    ]
    many = [{**findings[2], "step": 100 * i} for i in range(9)]
    assert display.finding_lines(many)[-1] == "… and 4 more"


def test_a_live_run_shows_itself_while_training_and_after() -> None:
    model, opt = make()
    run = gradwatch.watch(model, opt, project="live")
    plain_train(run, model, opt, 12)
    run.flush()
    assert repr(run) == f"<gradwatch.Run {run.id} project='live' step=12 status=running>"
    page = run._repr_html_()
    assert "running, 12 steps" in page and 'class="plotly-graph-div"' in page
    run.close()
    assert "status=finished" in repr(run)


def test_a_display_that_cannot_read_says_why_instead_of_raising() -> None:
    with socket.socket() as sock:  # a port nothing listens on any more
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = gradwatch.open_run("some-run", server=f"http://127.0.0.1:{port}")
    text = repr(run)
    assert re.match(
        rf"<gradwatch run some-run from http://127.0.0.1:{port} .*: cannot be read \(", text
    )
    assert run._repr_html_().startswith("<pre>&lt;gradwatch run some-run")
