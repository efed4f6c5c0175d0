"""TEMPORARY: every drift test that takes ``impl`` runs against the numpy port and the
torch original (deleted with the original)."""

from __future__ import annotations

import pytest

from tests.collector.drift.implementations import IMPLEMENTATIONS, Implementation


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl(request: pytest.FixtureRequest) -> Implementation:
    return IMPLEMENTATIONS[str(request.param)]
