"""User text reaches Plotly escaped (issue 19 item 7): no live links or markup in labels."""

from __future__ import annotations

import json

import numpy as np

from gradwatch_dashboard import compare_figures, figures

LINK = '<a href="https://evil.example">w</a>'
ESCAPED = '&lt;a href="https://evil.example"&gt;w&lt;/a&gt;'


def test_tensor_run_and_event_names_are_escaped_in_every_label() -> None:
    made = [
        figures.tensor_heatmap([LINK, "b"], [1, 2], [[1.0, float("nan")], [2.0, 3.0]], title=LINK),
        figures.loss_figure(([1, 2], [1.0, 2.0]), [(LINK, [1, 2], [0.1, 0.1])], focus=None),
        figures.nonfinite_figure([1, 2], [0, 1], [], first=(2, LINK)),
        figures.lifecycle_figure(
            [{"step": 1, "events": [["backward", 0.1, LINK]]}], {1: [LINK]}, focus=None
        ),
        compare_figures.overlay([(LINK, [1, 2], [1.0, 2.0])], [(2, LINK)]),
        compare_figures.tensor_difference(
            [LINK], [1, 2], np.array([[1.0, 2.0]]), np.array([[1.0, 3.0]]), (LINK, LINK)
        ),
        compare_figures.loss_difference((LINK, [1, 2], [1.0, 2.0]), [(LINK, [1, 2], [1.0, 3.0])]),
        figures.empty(LINK, LINK),
    ]
    for fig in made:
        text = json.dumps(fig.to_plotly_json(), default=str)
        assert "<a href" not in text, text[:300]
        assert ESCAPED in text or ESCAPED.replace('"', '\\"') in text
