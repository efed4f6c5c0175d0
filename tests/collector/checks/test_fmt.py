"""Numbers in finding messages (gradwatch.checks.fmt)."""

from __future__ import annotations

import pytest

from gradwatch.checks.fmt import counted, num, times


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1585910307273860.0, "1.6e15"),
        (2320000.0, "2.3e6"),
        (10000.0, "10,000"),
        (123.456, "123"),
        (99.7, "100"),
        (0.2879, "0.29"),
        (0.01, "0.01"),
        (0.00123, "0.0012"),
        (1e-9, "1e-9"),
        (-3e-7, "-3e-7"),
        (0.0, "0"),
        (float("nan"), "NaN"),
        (float("inf"), "Inf"),
        (float("-inf"), "-Inf"),
    ],
)
def test_num_reads_like_a_person_writes_it(value: float, text: str) -> None:
    assert num(value) == text


def test_times_never_says_zero_times() -> None:
    assert times(1585910307273860.0) == "1.6e15×"
    assert times(7993207.0) == "8e6×"
    assert times(2.0) == "2×"
    assert times(0.0) == "zero times"
    assert "0×" not in times(0.0)


def test_counted_puts_the_noun_in_the_right_number() -> None:
    assert counted(1, "tensor") == "1 tensor"  # not "1 tensors"
    assert counted(0, "tensor") == "0 tensors"
    assert counted(3, "other rank") == "3 other ranks"
    assert counted(2, "batch", "batches") == "2 batches"
