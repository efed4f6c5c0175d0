"""The DataLoader tap: every iterator's length, batches yielded and end, stamped with the
step it fed; the wrapper is reference-counted and leaves the loader's batches unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset, dataloader

from gradwatch.hooks import loaders


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    """Each test starts from an empty log (it is the process's)."""
    loaders.LOG.records.clear()


@pytest.fixture
def tap() -> Iterator[list[int]]:
    """The tap held, batches stamped with a step the test moves (``step[0]``)."""
    step = [0]
    watch = loaders.LoaderWatch(lambda: step[0], type("Check", (), {})())
    watch.attach()
    try:
        yield step
    finally:
        watch.detach()


def loader(n: int = 40, batch: int = 10) -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(TensorDataset(torch.arange(n, dtype=torch.float32)), batch_size=batch)


def test_iterators_are_logged_with_length_yield_end_and_steps(tap: list[int]) -> None:
    data = loader()
    next(iter(data))
    tap[0] = 3
    walked = [b for b in data]
    records = loaders.LOG.snapshot()
    assert len(walked) == 4 and len(records) == 2
    first, second = records
    assert (first.length, first.yielded, first.exhausted, first.first) == (4, 1, False, 1)
    assert (second.yielded, second.exhausted, second.first, second.last) == (4, True, 4, 4)
    assert first.left_early and not second.left_early


def test_batches_drawn_with_gradients_off_are_not_logged(tap: list[int]) -> None:
    with torch.no_grad():
        next(iter(loader()))
    assert loaders.LOG.snapshot() == []


def test_an_iterable_dataset_has_no_length(tap: list[int]) -> None:
    class Stream(IterableDataset[torch.Tensor]):
        def __iter__(self) -> Iterator[torch.Tensor]:
            return iter(torch.arange(5.0))

    items = list(DataLoader(Stream(), batch_size=2))
    (record,) = loaders.LOG.snapshot()
    assert len(items) == 3 and record.length is None and record.exhausted
    assert not record.left_early


def test_the_wrapper_returns_the_same_batches_and_is_removed_with_its_last_holder() -> None:
    original = dataloader._BaseDataLoaderIter.__next__
    plain = [b[0].tolist() for b in loader()]
    loaders.install()
    loaders.install()
    try:
        assert dataloader._BaseDataLoaderIter.__next__ is not original
        assert [b[0].tolist() for b in loader()] == plain
        loaders.uninstall()
        assert dataloader._BaseDataLoaderIter.__next__ is not original  # one holder left
    finally:
        loaders.uninstall()
    assert dataloader._BaseDataLoaderIter.__next__ is original


def test_a_batch_drawn_before_the_run_is_kept_for_its_first_step() -> None:
    loaders.install()
    try:
        next(iter(loader()))  # no run yet: stamped step 1, "before the run"
        step = [0]
        watch = loaders.LoaderWatch(lambda: step[0], type("Check", (), {})())
        watch.attach()
        try:
            (record,) = loaders.LOG.snapshot()
            assert (record.first, record.yielded, record.before_run) == (1, 1, False)
        finally:
            watch.detach()
    finally:
        loaders.uninstall()
