"""``repeated-batch``: the same input batch on consecutive steps, told apart from
full-batch training by how the program uses its DataLoaders — each bug in a real training
loop, and its correct twins."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader, TensorDataset

import gradwatch
from gradwatch.checks.repeated import REPEAT_STEPS, IteratorRecord, LoaderLog
from gradwatch.session.handle import Run
from tests.collector.checks.common import assert_quiet, first, mlp, mse, of

N, BATCH = 128, 16  # 8 batches per pass
Batches = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 6, generator=g)
    return TensorDataset(x, x @ torch.ones(6, 3))


def loop(make: Callable[[], Batches], steps: int = 20) -> Run:
    """Watch a fresh MLP, then run ``steps`` steps on the batches ``make()`` hands out
    (``make`` runs after ``watch``, as a loop's setup does)."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = gradwatch.watch(model, opt)
    try:
        batches = make()
        for i in range(steps):
            x, y = batches(i)
            opt.zero_grad()
            mse(model(x), y).backward()
            opt.step()
    finally:
        run.close()
    return run


def test_a_new_iterator_every_step_is_found_at_the_fifth_step() -> None:
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=False)
    run = loop(lambda: lambda i: next(iter(loader)))
    f = first(run, "repeated-batch")
    assert (f.step, f.severity, f.optimizer) == (REPEAT_STEPS, "warning", 0)
    assert f.details["why"] == "new-iterator" and f.details["loader_batches"] == N // BATCH
    assert "5 consecutive steps" in f.message and "new DataLoader iterator" in f.message
    assert len(of(run, "repeated-batch")) == 1  # one finding while the batch repeats


def test_a_batch_drawn_once_before_the_loop_is_found() -> None:
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)

    def make() -> Batches:
        x, y = next(iter(loader))
        return lambda i: (x, y)

    f = first(loop(make), "repeated-batch")
    assert f.step == REPEAT_STEPS and f.details["why"] == "drawn-once"


def test_full_batch_training_on_a_fixed_tensor_is_quiet() -> None:
    x, y = dataset().tensors
    assert_quiet(loop(lambda: lambda i: (x, y), 30))


def test_an_epoch_of_one_batch_is_quiet() -> None:
    loader = DataLoader(dataset(), batch_size=N, shuffle=False)

    def make() -> Batches:
        def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            while True:
                yield from loader

        it = batches()
        return lambda i: next(it)

    assert_quiet(loop(make, 30))


def test_a_loader_concatenated_into_one_tensor_is_quiet() -> None:
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=False)

    def make() -> Batches:
        pairs = list(loader)
        x, y = torch.cat([a for a, _ in pairs]), torch.cat([b for _, b in pairs])
        return lambda i: (x, y)

    assert_quiet(loop(make, 30))


def test_a_loader_walked_while_the_model_sees_one_batch_is_not_fed() -> None:
    """The loop draws a new batch every step but feeds the model the first one it kept (or
    every sample of the dataset is the same): the draws never reach the model."""
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=False)

    def make() -> Batches:
        def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            while True:
                yield from loader

        it = batches()
        kept = next(it)

        def fed(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            next(it)  # drawn, then dropped
            return kept

        return fed

    found = of(loop(make, 30), "repeated-batch")
    assert [f.details["why"] for f in found] == ["not-fed"]
    assert "the model is not fed what it draws" in found[0].message


def small_loader_epochs(feed_first: bool) -> Batches:
    """Epochs of a loader of two batches walked one batch a step (a new iterator per epoch);
    with ``feed_first`` the model gets the first batch every step instead."""
    loader = DataLoader(dataset(), batch_size=N // 2, shuffle=True)
    state: dict[str, object] = {}

    def fed(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        it = state.get("it")
        try:
            got = next(it)  # type: ignore[call-overload]
        except (StopIteration, TypeError):
            it = state["it"] = iter(loader)
            got = next(it)
        return state.setdefault("first", got) if feed_first else got  # type: ignore[return-value]

    return fed


def test_epochs_of_a_small_loader_walked_while_the_model_sees_one_batch_are_not_fed() -> None:
    found = of(loop(lambda: small_loader_epochs(feed_first=True), 20), "repeated-batch")
    assert [(f.step, f.details["why"]) for f in found] == [(REPEAT_STEPS, "not-fed")]


def test_epochs_of_a_small_loader_fed_to_the_model_are_quiet() -> None:
    assert_quiet(loop(lambda: small_loader_epochs(feed_first=False), 20))


def test_a_full_batch_with_a_partial_validation_pass_under_no_grad_is_quiet() -> None:
    x, y = dataset().tensors
    val = DataLoader(dataset(), batch_size=BATCH)

    def batches(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            next(iter(val))  # a glance at validation each step, gradients off
        return x, y

    assert_quiet(loop(lambda: batches, 30))


def test_new_batches_end_the_episode_and_a_later_repeat_is_a_new_finding() -> None:
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=False)
    moving = iter(DataLoader(dataset(), batch_size=BATCH, shuffle=True))

    def batches(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next(moving) if 10 <= i < 10 + REPEAT_STEPS else next(iter(loader))

    found = of(loop(lambda: batches, 30), "repeated-batch")
    assert [f.step for f in found] == [REPEAT_STEPS, 10 + 2 * REPEAT_STEPS]


def test_one_odd_step_inside_a_repeat_does_not_make_a_second_finding() -> None:
    """An evaluation forward with gradients on every few steps adds its input to the next
    step's: the repeat goes on around it, one finding."""
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=False)
    moving = iter(DataLoader(dataset(), batch_size=BATCH, shuffle=True))

    def batches(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return next(moving) if i in (10, 20) else next(iter(loader))

    found = of(loop(lambda: batches, 30), "repeated-batch")
    assert [f.step for f in found] == [REPEAT_STEPS]


def gan_like(reuse_real: bool, steps: int = 30, extra_every: int = 0) -> Run:
    """A discriminator that sees a real batch from a loader and a fresh fake one each step
    (a GAN's), the real batch drawn every step but, with ``reuse_real``, the first one kept."""
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)
    disc = mlp(d_in=6, d_out=1)
    opt = torch.optim.SGD(disc.parameters(), lr=0.05)
    run = gradwatch.watch(disc, opt)
    kept: list[torch.Tensor] = []
    try:
        it = iter(loader)
        for i in range(steps):
            try:
                real, _ = next(it)
            except StopIteration:
                it = iter(loader)
                real, _ = next(it)
            real = (kept or [real])[0] if reuse_real else real
            kept.append(real)
            fake = torch.randn(BATCH, 6, generator=torch.Generator().manual_seed(i))
            opt.zero_grad()
            if extra_every and i % extra_every == 0:  # a generator phase's forward, now and then
                disc(torch.randn(BATCH, 6)).mean().backward()
            loss = mse(disc(real), torch.ones(BATCH, 1)) + mse(disc(fake), torch.zeros(BATCH, 1))
            loss.backward()
            opt.step()
    finally:
        run.close()
    return run


def test_one_forward_of_a_step_seeing_one_batch_while_the_others_change_is_found() -> None:
    found = of(gan_like(reuse_real=True), "repeated-batch")
    assert len(found) == 1 and found[0].step == REPEAT_STEPS
    assert found[0].details["forward"] == 1 and found[0].details["why"] == "not-fed"
    assert "forward 1 of the model's 2 per step" in found[0].message


def test_a_forward_that_comes_and_goes_does_not_hide_the_repeated_one() -> None:
    """Every third step has a forward more before the real batch's (a WGAN's generator step
    every n_critic steps): the repeated input is followed by its checksum, not its place."""
    found = of(gan_like(reuse_real=True, extra_every=3), "repeated-batch")
    assert [(f.step, f.details["why"]) for f in found] == [(REPEAT_STEPS, "not-fed")]


def wgan_like(reuse_real: bool, steps: int = 30, n_critic: int = 5) -> Run:
    """A generator watched first that steps once per ``n_critic`` critic steps (a WGAN's):
    the loaders' steps (the first optimizer's) run slower than the critic's."""
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)
    gen, disc = mlp(1, d_in=4, d_out=6), mlp(2, d_in=6, d_out=1)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
    run = gradwatch.watch({"gen": gen, "disc": disc}, [opt_g, opt_d])
    kept = None
    try:
        for i, (real, _) in enumerate(b for _ in range(steps) for b in loader):
            if i == steps:
                break
            kept = kept if kept is not None and reuse_real else real
            opt_d.zero_grad()
            fake = gen(torch.randn(BATCH, 4)).detach()
            (disc(fake).mean() - disc(kept).mean()).backward()
            opt_d.step()
            if i % n_critic == 0:
                opt_g.zero_grad()
                (-disc(gen(torch.randn(BATCH, 4))).mean()).backward()
                opt_g.step()
    finally:
        run.close()
    return run


def test_a_critic_stepping_faster_than_the_first_optimizer_is_judged_on_its_own_steps() -> None:
    found = of(wgan_like(reuse_real=True), "repeated-batch")
    assert [(f.optimizer, f.details["why"]) for f in found] == [(1, "not-fed")]
    # (the critic's output bias has no gradient under a WGAN loss: param-no-grad's matter)
    assert of(wgan_like(reuse_real=False), "repeated-batch") == []


def test_a_gan_like_step_with_a_new_real_batch_each_step_is_quiet() -> None:
    assert_quiet(gan_like(reuse_real=False))
    assert_quiet(gan_like(reuse_real=False, extra_every=3))


def test_models_trained_side_by_side_on_one_repeated_batch_make_one_finding() -> None:
    """Four nets with four optimizers on each batch (MorvanZhou's 306_optimizer), the batch
    kept: one batch, one finding."""
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=False)
    nets = [mlp(seed) for seed in range(3)]
    opts = [torch.optim.SGD(n.parameters(), lr=0.05) for n in nets]
    run = gradwatch.watch(nets, opts)
    try:
        kept = None
        for x, y in (b for _ in range(3) for b in loader):
            kept = kept or (x, y)
            for net, opt in zip(nets, opts, strict=True):
                opt.zero_grad()
                mse(net(kept[0]), kept[1]).backward()
                opt.step()
    finally:
        run.close()
    assert len(of(run, "repeated-batch")) == 1


# -- the verdict on the loaders' log -------------------------------------------------------------
def log(*records: IteratorRecord) -> LoaderLog:
    out = LoaderLog()
    for r in records:
        out.add(r)
    return out


def test_verdict_without_loaders_is_none() -> None:
    assert LoaderLog().verdict(1, 5) is None


def test_verdict_new_iterator_needs_about_one_per_step() -> None:
    fresh = [IteratorRecord(8, s, s, yielded=1) for s in range(1, 6)]
    assert log(*fresh).verdict(1, 5) == ("new-iterator", fresh[-1])
    assert log(*fresh[:2]).verdict(1, 5) is None  # two iterators in five steps: epochs


def test_verdict_ignores_exhausted_iterators_and_loaders_of_one_batch() -> None:
    walked = [IteratorRecord(8, s, s, yielded=8, exhausted=True) for s in range(1, 6)]
    single = [IteratorRecord(1, s, s, yielded=1) for s in range(1, 6)]
    assert log(*walked).verdict(1, 5) is None
    assert log(*single).verdict(1, 5) is None


def test_verdict_not_fed_needs_one_iterator_drawing_at_every_step() -> None:
    walking = IteratorRecord(8, 1, 5, yielded=5)
    assert log(walking).verdict(1, 5) == ("not-fed", walking)
    assert log(IteratorRecord(8, 1, 3, yielded=3)).verdict(1, 5) is None  # stopped drawing


def test_verdict_drawn_once_only_when_nothing_was_drawn_since() -> None:
    once = IteratorRecord(8, 1, 1, yielded=1)
    assert log(once).verdict(1, 5) == ("drawn-once", once)
    walking = IteratorRecord(8, 1, 4, yielded=4)
    assert log(walking).verdict(1, 5) is None


def test_begin_run_keeps_only_what_was_drawn_before_any_run() -> None:
    before = IteratorRecord(8, 1, 1, yielded=1, before_run=True)
    during = IteratorRecord(8, 3, 9, yielded=7)
    kept = log(before, during)
    kept.begin_run()
    assert kept.snapshot() == [before] and not before.before_run


def test_with_the_check_off_the_loaders_are_left_alone() -> None:
    from torch.utils.data import dataloader

    model = mlp()
    run = gradwatch.watch(
        model, torch.optim.SGD(model.parameters(), lr=0.1), checks={"repeated-batch": "off"}
    )
    try:
        assert not hasattr(dataloader._BaseDataLoaderIter.__next__, "__gradwatch_original__")
    finally:
        run.close()


# -- labels: the batch kept and reused, its input changed anyway ------------------------------
C = 4


def labelled() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(N, 6, generator=g), torch.randint(0, C, (N,), generator=g))


def classify(
    batches: Callable[[Iterator[tuple[torch.Tensor, ...]]], Batches], steps: int = 24
) -> Run:
    """A classifier whose input gets fresh noise at every step (an adversarial start, a
    diffusion's noise, mixup's mixing), over the batches ``batches(iterator)`` hands out
    while the loop walks a shuffled loader of 8 batches, epoch after epoch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, C))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(labelled(), batch_size=BATCH, shuffle=True)

    def forever() -> Iterator[tuple[torch.Tensor, ...]]:
        while True:
            yield from loader

    run = gradwatch.watch(model, opt)
    try:
        pick = batches(forever())
        for i in range(steps):
            x, y = pick(i)
            opt.zero_grad()
            out = model(x + 0.1 * torch.randn_like(x))
            torch.nn.functional.cross_entropy(out, y).backward()
            opt.step()
    finally:
        run.close()
    return run


def test_a_kept_batch_whose_input_changes_anyway_is_found_by_its_labels() -> None:
    """fast_adversarial's loop with its first batch kept (the injector's reuse-batch): the
    model's input differs at every step (noise added), so its checksum never repeats, but
    the loss is given the very label tensor the loader yielded for step 1 while the loop
    draws a new batch at every step: not fed."""

    def kept(it: Iterator[tuple[torch.Tensor, ...]]) -> Batches:
        state: dict[str, tuple[torch.Tensor, ...]] = {}

        def pick(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            x, y = next(it)
            x, y = state.setdefault("batch", (x, y))
            return x, y

        return pick

    run = classify(kept)
    f = first(run, "repeated-batch")
    assert f.details["why"] == "not-fed" and f.details["drawn_for"] == 1
    assert f.details["given_as"] == "labels"
    assert f.step == 1 + REPEAT_STEPS and "the same labels on 5 consecutive steps" in f.message
    assert len(of(run, "repeated-batch")) == 1


def test_fresh_batches_with_noise_are_quiet() -> None:
    assert_quiet(classify(lambda it: lambda i: next(it)))


def test_a_batch_prefetched_one_step_ahead_is_quiet() -> None:
    """A prefetcher draws the next batch before the step that uses it: each label tensor is
    used once, at the step after it was drawn."""

    def ahead(it: Iterator[tuple[torch.Tensor, ...]]) -> Batches:
        queue = [next(it), next(it)]

        def pick(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            queue.append(next(it))
            x, y = queue.pop(0)
            return x, y

        return pick

    assert_quiet(classify(ahead))


def test_labels_the_program_builds_itself_are_not_followed() -> None:
    """Rotation prediction: the labels are the same tensor at every step, built once by the
    program (never yielded by a loader), while the loop draws new images."""
    rotations = torch.arange(C).repeat(BATCH // C)
    assert_quiet(classify(lambda it: lambda i: (next(it)[0], rotations)))


def test_labels_at_a_freed_loaders_address_are_not_the_loaders() -> None:
    """Labels permuted apart from their inputs at every step (the lottery ticket's mutant):
    each permuted copy is a new tensor of the same size, which the allocator may put where
    an earlier batch's labels were once those are freed. A tensor the loader yielded counts
    only while it is alive: a tensor at its old address is not it."""
    log = LoaderLog()
    drawn = torch.arange(BATCH)
    address = drawn.data_ptr()
    log.drew(1, [(address, weakref.ref(drawn))])
    log.used(2, address)
    assert log.drain() == ([(2, address, 1, "labels", None)], set())  # alive: its own
    del drawn  # the batch is dropped; another tensor may now be made at its address
    for step in range(3, 9):
        log.used(step, address)
    assert log.drain() == ([], set())


# -- inputs: a kept batch given to a model of several inputs ------------------------------------
class Denoiser(torch.nn.Module):
    """A diffusion model's shape: ``forward(x, noise)`` mixes the image with fresh noise at a
    random level and predicts the noise (MNISTDiffusion's ``MNISTDiffusion.forward``)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(7, 32), torch.nn.ReLU(), torch.nn.Linear(32, 6)
        )

    def forward(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        level = torch.rand(x.shape[0], 1)
        return self.net(torch.cat([level.sqrt() * x + (1 - level).sqrt() * noise, level], 1))


def denoise(
    pick: Callable[[torch.Tensor], torch.Tensor],
    second: Callable[[torch.Tensor], torch.Tensor] = torch.randn_like,
    steps: int = 24,
) -> Run:
    """A denoiser trained over a shuffled loader of 8 batches, epoch after epoch, on the
    image ``pick(drawn)`` makes of each batch drawn, given beside ``second(image)`` (fresh
    noise; its target)."""
    torch.manual_seed(0)
    model = Denoiser()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)
    batches = (x for _ in range(steps) for x, _ in loader)
    run = gradwatch.watch(model, opt)
    try:
        for _ in range(steps):
            image = pick(next(batches))
            noise = second(image)
            opt.zero_grad()
            mse(model(image, noise), noise).backward()
            opt.step()
    finally:
        run.close()
    return run


def test_a_kept_image_beside_fresh_noise_is_found_by_the_input_itself() -> None:
    """MNISTDiffusion's loop with its first batch kept (the injector's reuse-batch): the
    model's two inputs sum to a new checksum at every step (the noise is fresh) and no
    classification loss sees labels, but the model is given, step after step, the very image
    tensor the loader yielded for step 1 while the loop draws a new batch at each step."""
    kept: list[torch.Tensor] = []
    run = denoise(lambda x: (kept or [kept.append(x) or x])[0])
    f = first(run, "repeated-batch")
    assert (f.details["why"], f.details["given_as"], f.details["drawn_for"]) == (
        "not-fed",
        "input",
        1,
    )
    assert f.step == 1 + REPEAT_STEPS
    assert f.message.startswith("the model has been given the same input tensor on 5 ")
    assert len(of(run, "repeated-batch")) == 1


def test_a_fresh_image_beside_fresh_noise_is_quiet() -> None:
    assert_quiet(denoise(lambda x: x))


def test_a_fixed_sample_shown_beside_the_batch_each_step_is_quiet() -> None:
    """A sample drawn once from the loader and given to the model at every step beside the
    training batch (a fixed probe, with gradients on): the batch the loop draws reaches the
    model too, so the loop is fed."""
    torch.manual_seed(0)
    model = Denoiser()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)
    batches = (x for _ in range(24) for x, _ in loader)
    probe = next(batches)
    run = gradwatch.watch(model, opt)
    try:
        for _ in range(24):
            image = next(batches)
            noise = torch.randn_like(image)
            opt.zero_grad()
            shown = model(probe, torch.zeros_like(probe))  # kept, and looked at
            (mse(model(image, noise), noise) + 0.0 * shown.sum()).backward()
            opt.step()
    finally:
        run.close()
    assert of(run, "repeated-batch") == []


def test_a_constant_second_input_the_program_built_is_not_followed() -> None:
    """A conditioning tensor the program made once (never yielded by a loader) given at
    every step beside each fresh batch."""
    condition = torch.randn(BATCH, 6)
    assert_quiet(denoise(lambda x: x, lambda image: condition))


# -- a batch reused on purpose for a few updates -----------------------------------------------
def critic_iterations(watched: str, steps: int = 60, disc_iters: int = REPEAT_STEPS) -> Run:
    """A spectral-norm GAN's loop (christiancosgrove/pytorch-spectral-normalization-gan):
    for each real batch of the epoch, ``disc_iters`` discriminator updates on it, each with
    fresh fakes, then one generator update. ``watched``: ``"disc"`` alone, or ``"both"``
    (the generator first, so the loaders' steps are the generator's)."""
    torch.manual_seed(0)
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)
    gen, disc = mlp(1, d_in=4, d_out=6), mlp(2, d_in=6, d_out=1)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    if watched == "both":
        run = gradwatch.watch({"gen": gen, "disc": disc}, [opt_g, opt_d])
    else:
        run = gradwatch.watch(disc, opt_d)
    try:
        done = 0
        while done < steps:
            for real, _ in loader:
                for _ in range(disc_iters):
                    opt_d.zero_grad()
                    fake = gen(torch.randn(BATCH, 4)).detach()
                    loss = torch.relu(1 - disc(real)).mean() + torch.relu(1 + disc(fake)).mean()
                    loss.backward()
                    opt_d.step()
                    done += 1
                opt_g.zero_grad()
                (-disc(gen(torch.randn(BATCH, 4))).mean()).backward()
                opt_g.step()
                if done >= steps:
                    break
    finally:
        run.close()
    return run


def test_critic_iterations_on_each_real_batch_are_quiet() -> None:
    """Each real batch is kept for exactly the repeat the check waits for, then the loop
    draws the next from the iterator it holds: a bounded reuse, not a kept batch."""
    assert of(critic_iterations("disc"), "repeated-batch") == []


def test_critic_iterations_with_the_generator_first_are_quiet() -> None:
    """The loaders' steps are the generator's: a critic's repeat falls within one of them,
    in which nothing was drawn that the critic did not get."""
    assert of(critic_iterations("both"), "repeated-batch") == []


def test_a_batch_drawn_once_from_an_iterator_the_program_keeps_is_found_later() -> None:
    """``it = iter(loader); x, y = next(it)`` before the loop, the iterator kept: it could
    still draw, so the repeat must outlast a reuse by design (twice the wait) to tell."""
    loader = DataLoader(dataset(), batch_size=BATCH, shuffle=True)
    kept: list[object] = []

    def make() -> Batches:
        it = iter(loader)
        kept.append(it)
        x, y = next(it)
        return lambda i: (x, y)

    f = first(loop(make), "repeated-batch")
    assert f.step == 2 * REPEAT_STEPS and f.details["why"] == "drawn-once"


def test_verdict_drawn_once_from_a_held_iterator_waits_for_a_long_repeat() -> None:
    held = IteratorRecord(8, 1, 1, yielded=1)  # never let go
    assert log(held).verdict(1, 5, patient=False) is None
    assert log(held).verdict(1, 10, patient=True) == ("drawn-once", held)
    gone = IteratorRecord(8, 1, 1, yielded=1, dropped=1)  # next(iter(loader))
    assert log(gone).verdict(1, 5, patient=False) == ("drawn-once", gone)
    later = IteratorRecord(8, 1, 1, yielded=1, dropped=6)  # let go after the repeat began
    assert log(later).verdict(1, 5, patient=False) is None


def test_verdict_not_fed_needs_a_batch_drawn_after_the_repeat_began() -> None:
    walking = IteratorRecord(8, 1, 3, yielded=3)
    assert log(walking).verdict(3, 3) is None  # the repeat within one of the loaders' steps
    once = IteratorRecord(8, 3, 3, yielded=1)
    assert log(once).verdict(3, 3) is None  # nothing could be drawn since, either
    assert log(IteratorRecord(8, 1, 5, yielded=5)).verdict(3, 5)[0] == "not-fed"  # type: ignore[index]
