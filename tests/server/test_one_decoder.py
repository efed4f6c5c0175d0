"""One recorded run, read by every reader, reads the same: the local reader
(``gradwatch.reader.load_run``), the pandas API from the spool and over HTTP,
``gradwatch findings`` from the spool and from ``--server``, and the server's run detail
agree on the start record, the merged fingerprint, the end record, the per-step loss, the
user scalars and the findings — NaN and ±Inf included. They share one record decoder
(:mod:`gradwatch.core.records`), one HTTP client and one non-finite JSON encoding."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import gradwatch
from gradwatch.commands.findings import local_findings, server_findings
from gradwatch.core.client import Api
from gradwatch.core.nonfinite import to_jsonable
from gradwatch.core.records import decode, merge_fingerprints
from gradwatch.core.wire import Frame, Kind, Record
from gradwatch.reader import load_run
from gradwatch_server.settings import Settings
from tests.collector.analysis.recorded import BAD_STEP, STEPS, train
from tests.server.live import live_server
from tests.server.test_analysis import _stored

FINDING_KEYS = ("check", "severity", "step", "param", "message", "details")


def _exact(value: Any) -> str:
    """A value as text that tells NaN, ±Inf, -0.0 and key order apart."""
    return repr(to_jsonable(value))


def _signs(values: Any) -> list[bool]:
    """The sign of each number (-0.0 included); NaN keeps only its class."""
    return [bool(np.signbit(v)) for v in values if not math.isnan(v)]


def _findings(found: list[dict[str, Any]]) -> list[str]:
    return [_exact({k: f.get(k) for k in FINDING_KEYS}) for f in found]


def test_every_reader_reads_a_recorded_run_identically(settings: Settings) -> None:
    with live_server(settings) as url:
        run = train(bad=True, server=url)
        _stored(url, run)
        spooled = load_run(run.dir)
        local = gradwatch.open_run(run.id)
        remote = gradwatch.open_run(run.id, server=url)
        detail = Api(url).get(f"/runs/{run.id}")
        from_spool = local_findings(run.dir)
        from_server = server_findings(url, run.id, None)[run.id]

        starts = [spooled.start, local.info["start"], remote.info["start"], detail["start"]]
        assert len({_exact(s) for s in starts}) == 1
        prints = [spooled.fingerprint, local.fingerprint, remote.fingerprint, detail["fingerprint"]]
        assert len({_exact(p) for p in prints}) == 1 and "seeds" in spooled.fingerprint
        assert len({_exact(e) for e in (spooled.end, local.info["end"], detail["end"])}) == 1

        rows = spooled.steps[0]
        assert [r.step for r in rows] == list(range(1, STEPS + 1))
        loss = np.array([math.nan if r.loss is None else r.loss for r in rows])
        for frame in (local.steps, remote.steps):
            assert np.array_equal(frame.loss.to_numpy(), loss, equal_nan=True)
            assert _signs(frame.loss.to_numpy()) == _signs(loss)
        assert loss[BAD_STEP - 1] == math.inf and math.isnan(loss[-1])  # not vacuous

        for key in ("accuracy", "spike"):
            points = [(s, v) for s, k, v in spooled.scalars if k == key]
            steps, values = np.array([s for s, _ in points]), np.array([v for _, v in points])
            for frame in (local.steps, remote.steps):
                column = frame[key].loc[steps].to_numpy()
                assert np.array_equal(column, values, equal_nan=True)
                assert _signs(column) == _signs(values)
        assert {math.inf, -math.inf} <= {v for _, k, v in spooled.scalars if k == "spike"}

        assert from_spool and _findings(from_spool) == _findings(from_server)
        tables = [local.findings, remote.findings]
        assert all(len(t) == len(from_spool) for t in tables)
        assert [list(t.check) for t in tables] == [[f["check"] for f in from_spool]] * 2


def _print(seq: int, phase: str, **meta: Any) -> Frame:
    return Frame(seq, Record(Kind.FINGERPRINT, {"phase": phase, **meta}, {}), 0, 0, b"")


def test_the_fingerprint_merge_rule_puts_the_fast_phase_first_whatever_the_order() -> None:
    """A slow phase stored before the fast one (a resent batch) still wins: fast first,
    then slow, each by seq; ``phase`` is not part of the fingerprint."""
    frames = [_print(5, "slow", seeds=2, torch="b"), _print(9, "fast", seeds=1, host="h")]
    merged = decode(frames).fingerprint
    assert merged == {"seeds": 2, "host": "h", "torch": "b"}
    assert list(merged) == ["seeds", "host", "torch"]
    assert merged == merge_fingerprints(
        (f.record.meta["phase"], f.seq, f.record.meta) for f in frames
    )
