"""The bug corpus: every case in ``cases/`` is a minimal reproduction of a real bug class
(with the check it must raise, at the right step) or its correct twin (which must stay
quiet), run under ``gradwatch run`` exactly as a user would run it.

The selected cases are started two at a time as soon as the first of them runs (each
case is a few child processes that mostly import torch on one core), and every test waits
for its own case's outcome: the module takes about half the wall time it would one by one.
Each child runs with one intra-op thread, so two of them do not oversubscribe two cores."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.collector.corpus.harness import Outcome, all_cases, parse, run_case

WORKERS = max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[Path, Future[Outcome]]]:
    selected = [
        item.callspec.params["path"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    base = tmp_path_factory.mktemp("corpus")
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="corpus")
    futures = {
        path: pool.submit(run_case, parse(path), base / path.stem / "data", threads=1)
        for path in selected
    }
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", all_cases(), ids=lambda p: p.stem)
def test_case(path: Path, outcomes: dict[Path, Future[Outcome]]) -> None:
    case = parse(path)
    out = outcomes[path].result()
    assert out.returncode == 0, out.describe()
    if case.quiet:
        assert out.loud() == [], f"{case.name} is correct code:\n{out.describe()}"
    for expect in case.expects:
        assert any(expect.matches(f) for f in out.findings), (
            f"{case.name}: expected {expect}\n{out.describe()}"
        )
