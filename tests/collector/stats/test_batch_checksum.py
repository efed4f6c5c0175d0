"""The batch checksum taken later on the I/O thread (CPU runs) is the one taken at once."""

from __future__ import annotations

import gc
import math

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.stats import batch_checksum as batch_module
from gradwatch.stats.batch_checksum import Deferred, checksum_of, combine, inspect, resolve
from gradwatch.stats.rows import checksums
from gradwatch.transport.record_builder import batch_hash
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
    da, db = Deferred.of([a]), Deferred.of([b])
    assert da is not None and db is not None
    summed = da + db
    expected = checksum_of([a]).double() + checksum_of([b]).double()
    assert torch.equal(summed.resolve(), expected)


def test_an_input_edited_in_place_before_the_io_thread_looks_gives_nan_not_other_data() -> None:
    x = torch.randn(8, 5)
    deferred = Deferred.of([x])
    assert deferred is not None
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
        own = batch_hash(checksum_of([b]).double().tolist()[:2], sig)
        assert got in (own, unknown)


def test_deferred_checksums_keep_at_most_the_hold_budget_of_inputs_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An I/O thread that falls behind cannot make the training process hold every batch:
    past ``HOLD_BYTES`` the checksum is taken at once, and resolving gives the budget back."""
    gc.collect()  # inputs still held by earlier tests' runs count against the same budget
    base = batch_module._held_bytes
    monkeypatch.setattr(batch_module, "HOLD_BYTES", base + 3 * 8 * 5 * 4)  # three 8×5 inputs
    kept = [inspect((torch.randn(8, 5),), {}, defer=True)[0] for _ in range(4)]
    assert [isinstance(k, Deferred) for k in kept] == [True, True, True, False]
    assert isinstance(kept[0], Deferred)
    kept[0].resolve()  # the I/O thread caught up with one: room for one more
    assert isinstance(inspect((torch.randn(8, 5),), {}, defer=True)[0], Deferred)
    del kept
    gc.collect()
    assert batch_module._held_bytes <= base + 8 * 5 * 4


def test_a_deferred_and_an_immediate_checksum_of_one_step_add_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two forwards in one step, the second past the hold budget: the sum is still exact."""
    a, b = torch.randn(8, 5), torch.randn(8, 5)
    first = inspect((a,), {}, defer=True)[0]
    monkeypatch.setattr(batch_module, "HOLD_BYTES", 0)  # the budget runs out in between
    second = inspect((b,), {}, defer=True)[0]
    assert isinstance(first, Deferred) and isinstance(second, torch.Tensor)
    expected = checksum_of([a]).double() + checksum_of([b]).double()
    for got in (combine(first, second), combine(second, Deferred([([a], [a._version])]))):
        assert torch.equal(resolve(got), expected)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN where the other is NaN."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def test_a_windows_checksums_put_together_at_once_are_each_steps_own_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(3)
    inf = torch.randn(4, 6, generator=gen)
    inf[1, 2] = math.inf
    nan = torch.randn(4, 6, generator=gen)
    nan[0, 0] = math.nan
    moved = torch.randn(4, 6, generator=gen)
    cases: list[list[list[torch.Tensor]]] = [  # steps, each a list of forwards' inputs
        [[torch.randn(8, 3, 5, 5, generator=gen)]],
        [[torch.randint(0, 50, (8, 7), generator=gen)]],  # token ids: no Σ|x|
        [[torch.randn(8, 4, generator=gen), torch.randint(0, 9, (8,), generator=gen)]],
        [[torch.randint(0, 9, (8,), generator=gen), torch.randn(8, 4, generator=gen)]],
        [[torch.randn(8, 4, generator=gen, dtype=torch.float64)]],
        [[torch.randn(8, 4, generator=gen).half()]],
        [[torch.randn(5, 4, generator=gen)], [torch.randn(3, 4, generator=gen)]],  # 2 forwards
        [[inf]],
        [[nan]],
        [[moved]],
    ]
    deferred: list[torch.Tensor | Deferred] = []
    expected: list[torch.Tensor] = []
    for forwards in cases:
        parts = [Deferred.of(list(inputs)) for inputs in forwards]
        assert all(p is not None for p in parts)
        total = parts[0]
        for p in parts[1:]:
            total = combine(total, p)  # type: ignore[arg-type]
        assert total is not None
        deferred.append(total)
        immediate = [checksum_of(list(inputs)).double() for inputs in forwards]
        expected.append(sum(immediate[1:], immediate[0]))
    moved.add_(1.0)  # edited in place before the I/O thread looked: NaN, not other data
    expected[-1] = torch.full((batch_module.WIDTH,), math.nan, dtype=torch.float64)
    # an immediate checksum among deferred ones (the hold budget ran out at that step)
    at_once = checksum_of([torch.randn(8, 4, generator=gen)])
    deferred.insert(2, at_once)
    expected.insert(2, at_once.double())
    got = checksums(deferred)
    assert got.dtype == torch.float64 and got.shape == (len(expected), batch_module.WIDTH)
    for row, want in zip(got, expected, strict=True):
        assert _same_bits(row, want), (row, want)
    assert math.isnan(float(got[8, 2]))  # ±Inf in the batch: the scale is unknown, as before


def test_a_deferred_checksum_split_in_two_adds_up_to_its_value() -> None:
    x = torch.randn(8, 3, 4, 4)
    a, b = Deferred.of([x]), Deferred.of([x])
    assert a is not None and b is not None
    pair, scale = a.split()
    assert scale is not None and float(pair[2]) == 0.0
    whole = b.value()
    assert pair.dtype == whole.dtype == torch.float32
    assert torch.equal(pair[:2], whole[:2]) and torch.equal(scale, whole[2])


def test_a_deferred_checksum_read_twice_gives_its_value_twice() -> None:
    """One forward's checksum is in the steps of every optimizer that owns the model: the
    second read is the value, not the zeros of inputs already let go."""
    x = torch.randn(8, 5)
    deferred = Deferred.of([x])
    assert deferred is not None
    first = deferred.resolve()
    assert torch.equal(deferred.resolve(), first)
    assert torch.equal(first, checksum_of([x]).double())
    other = Deferred.of([torch.randn(8, 5)])
    assert other is not None
    assert torch.equal((deferred + other).resolve(), first + other.resolve())


class _ActorCritic(nn.Module):
    """One module, two heads, each trained by its own optimizer (Lightning's PPO)."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Linear(4, 2)
        self.critic = nn.Linear(4, 1)


def test_a_model_two_optimizers_own_records_each_steps_own_batch_for_both() -> None:
    """Both optimizers' steps see the heads' forwards of the batch drawn at that step: no
    step of either reads as the empty checksum (the heads run as submodules of a root that
    does not run in training, as in Lightning's PPO)."""
    torch.manual_seed(0)
    model = _ActorCritic()
    actor_opt = torch.optim.Adam(model.actor.parameters(), lr=1e-3)
    critic_opt = torch.optim.Adam(model.critic.parameters(), lr=1e-3)
    with gradwatch.watch(model, [actor_opt, critic_opt]) as run:
        for _ in range(12):
            state = torch.randn(16, 4)
            model.actor(state).logsumexp(1).mean().backward()
            actor_opt.step()
            actor_opt.zero_grad()
            model.critic(state).pow(2).mean().backward()
            critic_opt.step()
            critic_opt.zero_grad()
    empty = batch_hash([0.0, 0.0], ["float32[16, 4]"])
    for o in (0, 1):
        hashes = [s["batch_hash"] for s in steps(run.dir, o)]
        assert len(hashes) == 12 and empty not in hashes, (o, hashes)
        assert len(set(hashes)) == 12  # a new batch each step
