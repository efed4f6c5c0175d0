"""The check engine reads from the registry which checks run on every collected row and
which of them read the step's pre-update values (``Check.row``): a policy that acts on one
of them makes the engine take those values at once, and rows one at a time."""

from __future__ import annotations

import pytest

from gradwatch.checks.engine import ROW_CHECKS, VALUE_CHECKS, CheckEngine
from gradwatch.checks.findings import FindingSink
from gradwatch.core.catalogue import Policy
from gradwatch.core.checks import REGISTRY


def engine(acting: str | None) -> CheckEngine:
    """An engine whose sink has policy ``raise`` for ``acting`` alone."""

    def policy(check: str) -> Policy:
        return "raise" if check == acting else "warn"

    sink = FindingSink(policy, lambda record: None)
    return CheckEngine(sink, accumulation_steps=None, models={})


def test_the_row_checks_are_the_registrys_declarations() -> None:
    declared = {c.id: c.row for c in REGISTRY.checks if c.row is not None}
    assert set(VALUE_CHECKS) == {k for k, v in declared.items() if v == "values"}
    assert set(ROW_CHECKS) == set(declared)
    # the values are read before the update; every other row check after it
    assert all(REGISTRY.by_id[c].stage == "before-update" for c in VALUE_CHECKS)
    assert all(
        REGISTRY.by_id[c].stage == "after-update" for c in set(ROW_CHECKS) - set(VALUE_CHECKS)
    )


@pytest.mark.parametrize("check", sorted(VALUE_CHECKS))
def test_a_policy_that_acts_on_a_value_check_takes_the_values_at_once(check: str) -> None:
    assert engine(check).needs_values_now()


@pytest.mark.parametrize("check", ["loss-at-chance", "repeated-batch", "update-ratio", None])
def test_other_checks_leave_the_values_to_the_transfer(check: str | None) -> None:
    assert not engine(check).needs_values_now()
