"""The check-id constants and the catalogue name the same checks, one constant per id."""

from __future__ import annotations

from gradwatch.core import checkids
from gradwatch.core.catalogue import CATALOGUE


def _constants() -> dict[str, str]:
    return {
        name: value
        for name, value in vars(checkids).items()
        if name.isupper() and isinstance(value, str)
    }


def test_every_catalogued_check_has_one_constant_and_no_constant_is_unknown() -> None:
    constants = _constants()
    assert sorted(constants.values()) == sorted(c.id for c in CATALOGUE)
    for name, value in constants.items():
        assert name == value.upper().replace("-", "_")


def test_the_nonfinite_group_names_catalogued_checks() -> None:
    assert set(checkids.NONFINITE) <= {c.id for c in CATALOGUE}
