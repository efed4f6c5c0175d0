"""Packed statistic blobs: every bit comes back, and they are smaller than plain."""

from __future__ import annotations

import numpy as np
import pytest

from gradwatch_server.blobcodec import pack, unpack_bytes, unpack_rows

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1e-45, 3.4e38, -1e308]


@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_packing_is_lossless_bit_for_bit_and_smaller(dtype: str) -> None:
    rng = np.random.default_rng(3)
    values = rng.random((300, 50)).astype(dtype)
    with np.errstate(over="ignore"):
        values.flat[: len(SPECIAL)] = np.array(SPECIAL).astype(dtype)
    odd_nan = np.frombuffer(np.array([0x7FC00123], "<u4").tobytes(), "<f4")[0]
    values[9, 9] = odd_nan  # a NaN with a payload keeps it
    kind, data = pack(values, ("f4", "f8"))
    assert kind == dtype + "z"
    assert len(data) < values.nbytes * (0.82 if dtype == "f4" else 0.9)
    back = unpack_rows(data, kind, 300, 50)
    assert back.dtype == values.dtype and back.tobytes() == values.tobytes()
    assert unpack_rows(data, kind, 300, 50, [9, 0, 299]).tobytes() == values[[9, 0, 299]].tobytes()
    assert unpack_bytes(data, kind, values.size) == values.tobytes()


def test_what_would_not_shrink_stays_plain() -> None:
    small = np.arange(10, dtype="f4").reshape(2, 5)
    assert pack(small) == ("f4", small.tobytes())
    ints = np.arange(100, dtype="<i8").reshape(1, 100)
    assert pack(ints) == ("i8", ints.tobytes())
    doubles = np.random.default_rng(0).random((30, 10))
    assert pack(doubles) == ("f8", doubles.tobytes())  # ingest packs f4 only


def test_a_damaged_packed_blob_is_refused() -> None:
    kind, data = pack(np.random.default_rng(0).random((30, 10)).astype("f4"))
    with pytest.raises(ValueError, match="does not hold"):
        unpack_rows(data[:-1], kind, 30, 10)
    with pytest.raises(ValueError, match="does not hold"):
        unpack_rows(data, kind, 31, 10)
