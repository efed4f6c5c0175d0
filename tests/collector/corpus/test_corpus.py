"""The bug corpus: every case in ``cases/`` is a minimal reproduction of a real bug class
(with the check it must raise, at the right step) or its correct twin (which must stay
quiet), run under ``gradwatch run`` exactly as a user would run it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.collector.corpus.harness import all_cases, parse, run_case


@pytest.mark.slow
@pytest.mark.parametrize("path", all_cases(), ids=lambda p: p.stem)
def test_case(path: Path, tmp_path: Path) -> None:
    case = parse(path)
    out = run_case(case, tmp_path / "data")
    assert out.returncode == 0, out.describe()
    if case.quiet:
        assert out.loud() == [], f"{case.name} is correct code:\n{out.describe()}"
    for expect in case.expects:
        assert any(expect.matches(f) for f in out.findings), (
            f"{case.name}: expected {expect}\n{out.describe()}"
        )
