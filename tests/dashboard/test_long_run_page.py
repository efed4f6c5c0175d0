"""The run page of a long run (more than ``FINE_VALUES`` steps × tensors), against a real
server on loopback: its four statistics come in one overview reply as typed arrays, and
what the page draws from them keeps every spike and every non-finite value."""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

from gradwatch.core.nonfinite import decode_float
from gradwatch.core.wire import FRAME_CONTENT_TYPE
from gradwatch_dashboard import ids
from gradwatch_dashboard.api_client import Api
from gradwatch_dashboard.pages import run
from gradwatch_server.ingest.summaries import BLOCK
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import live_server

TENSORS = 40
STEPS = 5120  # 40 × 5,120 = 204,800 values: the overview path
SPIKE = (5, 1000)  # tensor 5's gradient norm at step 1001
NAN_AT = (7, 3000)  # tensor 7's gradients NaN from step 3001 for 10 steps


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(server URL, run id) of a real server holding one long run."""
    tmp = tmp_path_factory.mktemp("long")
    settings = Settings(
        db_url=f"sqlite:///{tmp / 'gw.db'}", data_dir=tmp / "data", import_interval=None
    )
    rng = np.random.default_rng(5)
    stats = rng.uniform(0.5, 1.0, (STEPS, TENSORS, 4)).astype("f4")
    stats[:, :, 3] = 0.0  # nonfinite_grad: no tensor had a NaN/Inf gradient ...
    stats[SPIKE[1], SPIKE[0], 0] = 1e6
    i, s = NAN_AT
    stats[s : s + 10, i, 0] = np.nan
    stats[s : s + 10, i, 3] = 1.0  # ... but tensor 7 for those 10 steps
    names = [f"layer{k}.weight" for k in range(TENSORS)]
    records = [f.start("long", tensors=names)]
    records += [f.steps(1 + a, stats[a : a + 512]) for a in range(0, STEPS, 512)]
    with live_server(settings) as url:
        for body in f.frames(records):
            request = urllib.request.Request(
                f"{url}/api/v1/ingest",
                data=body,
                headers={**f.headers("long"), "Content-Type": FRAME_CONTENT_TYPE},
            )
            with urllib.request.urlopen(request) as reply:
                assert reply.status == 200
        yield url, "long"


def test_long_run_page_draws_the_overview_of_all_four_statistics(
    long_run: tuple[str, str],
) -> None:
    url, run_id = long_run
    api = Api(url)
    data = run.fetch(api, run_id, None)
    assert TENSORS * STEPS > run.FINE_VALUES
    plain = api.get(f"/runs/{run_id}/overview", points=run.COLUMNS)  # the JSON form
    for stat in run.STATS:
        got = data[stat]
        assert isinstance(got["values"], np.ndarray) and got["values"].shape[0] == TENSORS
        assert got["steps"] == plain["steps"] and len(got["steps"]) <= run.COLUMNS
        if stat == "grad_norm":
            want = np.array([[decode_float(v) for v in row] for row in plain["values"]])
            np.testing.assert_array_equal(got["values"], want)  # NaN where NaN, exactly
    parts = run.view(data)
    heat = parts[ids.RUN_HEATMAP]
    steps = list(heat.data[0].x)
    column = max(j for j, s in enumerate(steps) if s <= SPIKE[1] + 1)
    z = np.asarray(heat.data[0].z)
    assert z[SPIKE[0], column] == pytest.approx(6.0)  # log10 of the spike: not averaged away
    nan_marks = next(t for t in heat.data if t.name == "NaN")
    assert set(nan_marks.y) == {"layer7.weight"}
    assert min(nan_marks.x) <= NAN_AT[1] + 1 <= max(nan_marks.x) + BLOCK * 4
    counts = list(parts[ids.RUN_NONFINITE].data[0].y)
    assert sum(counts) >= 1 and max(counts) == 1  # one tensor, in the columns it was bad
    words = str(parts[ids.RUN_HEADER])
    assert "layer7.weight" in words  # first NaN/Inf named from the overview (no finding)
    assert math.isnan(z[NAN_AT[0], counts.index(1)])  # the NaN cell is a gap, marked
