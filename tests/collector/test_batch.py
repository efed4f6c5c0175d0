"""The batch checksum taken later on the I/O thread (CPU runs) is the one taken at once."""

from __future__ import annotations

import math

import torch
from torch import nn

import gradwatch
from gradwatch.batch import Deferred, checksum_of, inspect, resolve
from gradwatch.records import batch_hash
from tests.collector.steps import steps


def test_a_deferred_checksum_is_bit_identical_to_the_immediate_one() -> None:
    x = torch.randn(16, 3, 8, 8)
    ids = torch.randint(0, 1000, (16, 12))
    now, sig = inspect((x, ids), {})
    later, sig_later = inspect((x, ids), {}, defer=True)
    assert isinstance(later, Deferred) and sig == sig_later
    assert isinstance(now, torch.Tensor)
    assert torch.equal(resolve(later), now.to(torch.float64))


def test_forwards_of_one_step_add_up_deferred_as_on_the_device() -> None:
    a, b = torch.randn(8, 5), torch.randn(8, 5)
    summed = Deferred.of([a]) + Deferred.of([b])
    expected = checksum_of([a]).double() + checksum_of([b]).double()
    assert torch.equal(summed.resolve(), expected)


def test_an_input_edited_in_place_before_the_io_thread_looks_gives_nan_not_other_data() -> None:
    x = torch.randn(8, 5)
    deferred = Deferred.of([x])
    x.copy_(torch.randn(8, 5))  # a reused input buffer, refilled with the next batch
    assert all(math.isnan(v) for v in deferred.resolve().tolist())


def test_a_cpu_run_records_each_steps_own_batch_even_with_a_reused_input_buffer(
    tmp_path: object,
) -> None:
    """Steps whose buffer was refilled before the I/O thread read it say 'unknown' (NaN
    checksum); every other step has the hash of exactly its own batch."""
    torch.manual_seed(0)
    model = nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [torch.randn(8, 5) for _ in range(6)]
    buffer = torch.empty(8, 5)
    with gradwatch.watch(model, opt) as run:
        for b in batches:
            buffer.copy_(b)
            opt.zero_grad()
            model(buffer).pow(2).mean().backward()
            opt.step()
    sig = ["float32[8, 5]"]
    unknown = batch_hash([math.nan, math.nan], sig)
    recorded = [s["batch_hash"] for s in steps(run.dir)]
    assert len(recorded) == len(batches)
    for got, b in zip(recorded, batches, strict=True):
        own = batch_hash(checksum_of([b]).double().tolist(), sig)
        assert got in (own, unknown)
