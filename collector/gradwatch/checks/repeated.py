"""``repeated-batch``: the model got the same input batch on ``REPEAT_STEPS`` collected steps
in a row, and the program's DataLoaders say why.

Each collected step carries the checksum of the batch the watched model received
(:mod:`gradwatch.stats.batch_checksum`, on the I/O thread: no extra work in training). A
checksum that repeats is not a finding by itself: full-batch gradient descent on a fixed
tensor (small regressions, PINNs) feeds the same batch at every step on purpose, and so
does an epoch of one batch. What tells the bug apart is how the program uses its
DataLoaders (:mod:`gradwatch.hooks.loaders` logs every iterator, its length and how many
batches it yielded, at the step it was used):

* ``new-iterator``: while the batch repeated, a new iterator of a loader of two or more
  batches was made at about every step and left after its first batch or few
  (``next(iter(loader))`` inside the loop: with ``shuffle=False`` always the first batch);
* ``drawn-once``: no batch was drawn while it repeated, and an iterator of a loader of two
  or more batches was left part-way before (``x, y = next(iter(loader))`` before the loop).

Quiet without DataLoaders (a fixed tensor), with loaders of one batch, with iterators
walked to their end (a loader concatenated into one tensor, a full validation pass each
step). A third cause is a finding too:

* ``not-fed``: iterators of a loader of several batches drew a batch at every step of
  the repeat (one iterator, or one per epoch of a small loader), yet the model's input
  stayed the same: what the loop draws does not reach the model (a batch kept from before
  the loop, a stale variable), or every sample of the dataset is identical (then the data
  is the bug).

A step of several forwards of the model (a GAN discriminator on a real and a fake batch)
sums their checksums, so one input that repeats next to others that change does not repeat
the sum: such steps also carry each forward's checksum apart, and a streak of one forward
is asked about the same way while the step's whole input does not repeat. A reported repeat
lasts until ``REPEAT_STEPS`` collected steps in a row go by without its batch: one odd step
inside it (an evaluation forward with gradients on, every few steps) is no new finding.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gradwatch.checks.findings import FindingSink, finding
from gradwatch.core import checkids

ID = checkids.REPEATED_BATCH
#: collected steps in a row with one batch checksum before the loaders are asked
REPEAT_STEPS = 5
KEPT_ITERATORS = 256  # iterator records kept per run (the latest ones)
KEPT_LABELS = 64  # tensors of recent batches remembered (by storage address)
KEPT_USES = 4096  # stale-label uses waiting for the I/O thread

Verdict = Literal["new-iterator", "drawn-once", "not-fed"]
Use = Literal["input", "labels"]  # what a tensor a loader yielded was given as
USES: tuple[Use, ...] = ("input", "labels")
UseRecord = tuple[int, int, int, Use, int | None]  # step, address, step drawn, kind, owner


@dataclass
class IteratorRecord:
    """One DataLoader iterator as the training loop used it (steps: the optimizer step the
    batch was drawn for, i.e. the run's completed steps + 1)."""

    length: int | None  # batches per pass (None: an iterable dataset without a length)
    first: int  # step of its first batch
    last: int  # step of its latest batch
    yielded: int = 0
    exhausted: bool = False  # StopIteration reached
    before_run: bool = False  # drawn while no run was watching (before watch())
    #: the step at which the program let go of the iterator (None: it still holds it, or
    #: not known): an iterator it holds can still draw the next batch
    dropped: int | None = None

    def held_at(self, step: int) -> bool:
        """The program still held the iterator at ``step`` (``for x, y in loader`` around
        the loop), as opposed to ``next(iter(loader))``, whose iterator is gone at once."""
        return self.dropped is None or self.dropped > step

    @property
    def several(self) -> bool:
        """A loader of two or more batches (or of unknown length)."""
        return self.length is None or self.length >= 2

    @property
    def walked(self) -> bool:
        """Drawn from at every step of its life, as a training loop draws (at least one
        batch a step), and not several batches within one step (a pass over the loader
        inside a step)."""
        steps = self.last - self.first + 1
        return self.yielded >= steps and (steps > 1 or self.yielded <= 1)

    @property
    def left_early(self) -> bool:
        """Left (or still held) before the end of a loader of several batches."""
        if not self.several or self.exhausted:
            return False
        return self.length is None or self.yielded < self.length


class LoaderLog:
    """The DataLoader iterators of one run (written by the training thread, read by the
    I/O thread), and the label tensors they yielded: which step each was drawn for, and
    the steps at which a classification loss was given one drawn at an earlier step."""

    def __init__(self) -> None:
        self.records: deque[IteratorRecord] = deque(maxlen=KEPT_ITERATORS)
        self._lock = threading.Lock()
        #: the storage address of each tensor of a recent batch (its inputs and labels) ->
        #: the step it was drawn for and a weak reference to it: once the tensor is gone,
        #: another tensor the program makes at that address (the allocator reuses a freed
        #: block) is not it
        self.drawn: OrderedDict[int, tuple[int, Callable[[], object]]] = OrderedDict()
        #: (step, address, drawn, kind, owner): the model of optimizer ``owner`` (kind
        #: "input") or a classification loss ("labels", owner None) given a tensor drawn for
        #: an earlier step
        self.uses: deque[UseRecord] = deque(maxlen=KEPT_USES)
        #: (step, kind): given a tensor drawn for that very step
        self.fresh: deque[tuple[int, Use]] = deque(maxlen=KEPT_USES)
        self._early: set[int] = set()  # labels drawn while no run watched

    def drew(
        self,
        step: int,
        tensors: list[tuple[int, Callable[[], object]]],
        before_run: bool = False,
    ) -> None:
        """A batch drawn for ``step`` holding integer tensors (their addresses and weak
        references; ``before_run``: while no run watched, kept for the next run's first
        step)."""
        for address, ref in tensors:
            self.drawn[address] = (step, ref)
            self.drawn.move_to_end(address)
            if before_run:
                self._early.add(address)
            else:
                self._early.discard(address)
        while len(self.drawn) > KEPT_LABELS:
            self.drawn.popitem(last=False)

    def used(self, step: int, address: int, kind: Use = "labels", owner: int | None = None) -> None:
        """The model (``kind`` "input") or a classification loss ("labels") of ``step`` was
        given the tensor at ``address``: kept when a loader drew it for an earlier step and
        the tensor it yielded is still alive (so the data at that address is its own, or a
        view of it); a tensor drawn for this very step is noted as fresh."""
        entry = self.drawn.get(address)
        if entry is None:
            return
        drawn, ref = entry
        if ref() is None:
            return
        if drawn == step:
            self.fresh.append((step, kind))
        if drawn < step:
            self.uses.append((step, address, drawn, kind, owner))

    def drain(self) -> tuple[list[UseRecord], set[tuple[int, Use]]]:
        """The uses of tensors drawn for earlier steps since the last call, and the (step,
        kind) pairs given a fresh tensor."""
        out = []
        while self.uses:
            out.append(self.uses.popleft())
        fresh = set()
        while self.fresh:
            fresh.add(self.fresh.popleft())
        return out, fresh

    def add(self, record: IteratorRecord) -> None:
        self.records.append(record)

    def begin_run(self) -> None:
        """A run starts: keep only the iterators used while no run watched (a batch drawn
        before the loop, which feeds that run's first step)."""
        with self._lock:
            kept = [r for r in self.records if r.before_run]
            self.records.clear()
            for r in kept:
                r.before_run = False
                self.records.append(r)
            early = {a: (1, e[1]) for a, e in self.drawn.items() if a in self._early}
            self.drawn.clear()
            self.drawn.update(early)
            self._early.clear()
            self.uses.clear()
            self.fresh.clear()

    def snapshot(self) -> list[IteratorRecord]:
        with self._lock:
            return list(self.records)

    def verdict(
        self, first: int, last: int, patient: bool = True
    ) -> tuple[Verdict, IteratorRecord] | None:
        """Why steps ``first``…``last`` (one batch checksum) saw the same batch, or None
        when the loaders do not show a misuse. ``patient``: the repeat has lasted long
        enough that a batch drawn from an iterator the program still holds is not a bounded
        reuse (several updates per batch, a GAN's critic iterations) about to end."""
        records = self.snapshot()
        if not records:
            return None  # no DataLoader: a fixed tensor (full-batch training)
        if last <= first:
            return None  # within one of the loaders' steps: nothing could be drawn meanwhile
        fresh = [r for r in records if first <= r.first <= last and r.left_early]
        if fresh and len(fresh) >= max(last - first, 1):  # about one new iterator per step
            return "new-iterator", fresh[-1]
        if all(r.last <= first for r in records):
            left = [r for r in records if r.left_early]
            # an iterator still held can draw again: the batch may be reused on purpose
            # for a few updates, so only a long repeat tells
            if left and (patient or not left[-1].held_at(first)):
                return "drawn-once", left[-1]
        # iterators drew a batch at every step of the repeat, one after another (one, or an
        # epoch's each of a small loader): the loop walks the loader, but what it draws
        # never reaches the model (a stale variable, a batch kept from before the loop) —
        # or every batch of the dataset is the same sample
        walking = [r for r in records if r.several and r.walked and r.last >= first]
        drawn = {s for r in walking for s in range(max(r.first, first), min(r.last, last) + 1)}
        if walking and len(drawn) == last - first + 1:
            return "not-fed", walking[-1]
        return None


WHOLE = -1  # the slot of a step's whole input (the sum over its forwards)


@dataclass
class _Streak:
    key: tuple[float, ...]
    first: int
    count: int = 1
    asked: int = 0  # length of the streak when the loaders were last asked
    forward: int = WHOLE  # which forward of the latest step (WHOLE: all of them)
    forwards: int = 1  # forwards per step when the streak was asked
    since: int = 0  # the run's step counter at its first step (the loaders' steps)


@dataclass
class _Episode:
    """A reported repeat: it lasts until ``REPEAT_STEPS`` collected steps in a row go by
    without its batch, so one odd step (an evaluation forward with gradients on, every
    50 steps) does not make it a new finding."""

    key: tuple[float, ...]
    missing: int = 0


class RepeatedBatch:
    """``repeated-batch`` over the collected rows of every optimizer."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self.log = LoaderLog()
        self._whole: dict[int, _Streak] = {}  # optimizer -> streak of the whole input
        #: optimizer -> checksum -> streak of one forward's input (steps of several forwards)
        self._parts: dict[int, dict[tuple[float, ...], _Streak]] = {}
        self._open: dict[int, _Episode] = {}
        #: optimizer -> the longest repeat of one input that has ended (a reuse by design)
        self._longest: dict[int, int] = {}
        #: the tensors a loader yielded that the model or a loss keeps being given, keyed
        #: (address, step drawn, what it was given as); ``asked`` is set once told
        self._stale: dict[tuple[float, ...], _Streak] = {}
        self._held: list[UseRecord] = []  # uses of a step not in a row yet, or another's
        self._fed: set[tuple[int, Use]] = set()  # (step, kind) given a fresh tensor
        self._told: set[int] = set()  # the steps whose kept batch was reported

    def observe_rows(
        self,
        o: int,
        steps: list[int],
        checksums: list[list[float]],
        taken: list[bool],
        inputs: list[list[list[float]] | None] | None = None,
        clocks: list[int] | None = None,
    ) -> None:
        """Feed a window of optimizer ``o``'s collected steps: each row's batch checksum,
        whether one was taken (a step whose model saw no tensor input has none), for a
        step of several forwards each forward's checksum apart (``inputs``), and the run's
        step counter at each (``clocks``, what the loaders stamp batches with: the first
        optimizer's steps; default ``steps``)."""
        for r, (step, values, ok) in enumerate(zip(steps, checksums, taken, strict=True)):
            whole = tuple(values) if ok and all(map(math.isfinite, values)) else None
            parts = (inputs[r] if inputs is not None else None) or []
            finite = [tuple(p) for p in parts if all(map(math.isfinite, p))]
            self._row(o, (step, clocks[r] if clocks else step), whole, finite)
        self._labels(o, max(clocks) if clocks else max(steps, default=0))
        self.sink.flush()

    def _labels(self, o: int, last: int) -> None:
        """Streaks of one tensor a DataLoader yielded: the model (its input) or a
        classification loss (its labels) given, at every step, the very tensor a loader
        yielded for an earlier step (the same storage, drawn once), while the loop keeps
        drawing new batches that never reach it (``not-fed``): a batch kept from before the
        loop and used again. An input that changes anyway (noise, mixup, an adversarial
        perturbation added to it; a diffusion model given the kept image and fresh noise)
        hides that from the input checksum. A step at which the model (or the loss) was
        also given the batch drawn for it is fed (a fixed sample drawn once and shown to the
        model beside the training batch); tensors a program builds itself (rotation
        targets, ``arange``) were never yielded by a loader and are not followed; a
        prefetched batch is used once. ``last``: the loaders' step of the window's last
        row (uses of a later step wait for its row: what else that step was given is not
        all known yet)."""
        uses, fresh = self.log.drain()
        self._fed |= fresh
        waiting = self._held + uses
        ready = [u for u in waiting if u[0] <= last and u[4] in (None, o)]
        self._held = [u for u in waiting if u[0] > last or u[4] not in (None, o)][-KEPT_USES:]
        for step, address, drawn, kind, _owner in sorted(ready, key=lambda u: u[0]):
            if (step, kind) in self._fed:
                continue  # the batch drawn for this step reached it too
            key: tuple[float, ...] = (address, drawn, USES.index(kind))
            streak = self._stale.get(key)
            if streak is None or step > streak.first + streak.count:
                self._stale[key] = _Streak(key, step)
                continue
            if step < streak.first + streak.count:
                continue  # a second use at the same step (mixup's two label sets)
            streak.count += 1
            first, count = streak.first, streak.count
            if count < REPEAT_STEPS or streak.asked or drawn in self._told:
                continue  # one finding per kept batch
            if self._open:
                continue  # the input checksum told it already
            found = self.log.verdict(first, first + count - 1)
            if found is None or found[0] != "not-fed":
                continue
            streak.asked = count
            self._told.add(drawn)
            self._report_kept(o, found[1], kind, drawn, first, count)
        self._fed = {f for f in self._fed if f[0] > last - KEPT_USES}
        if len(self._stale) > KEPT_LABELS:  # the latest streaks are the ones that go on
            newest = sorted(self._stale.items(), key=lambda kv: kv[1].first + kv[1].count)
            self._stale = dict(newest[-KEPT_LABELS:])

    def _report_kept(
        self, o: int, record: IteratorRecord, kind: Use, drawn: int, first: int, count: int
    ) -> None:
        size = "an unknown number of" if record.length is None else f"{record.length:,}"
        what = (
            "the model has been given the same input tensor"
            if kind == "input"
            else "the loss has been given the same labels"
        )
        tensor = "tensor" if kind == "input" else "label tensor"
        self.sink.report(
            finding(
                ID,
                first + count - 1,
                f"{what} on {count} consecutive steps (the {tensor} drawn from a DataLoader "
                f"for step {drawn}, since step {first}) while the loop draws a new batch at "
                f"every step from a DataLoader of {size} batches: the batch it draws does not "
                "reach the model (a batch kept from before the loop, a stale variable).",
                "pass the batch the loop draws to the model and the loss; when overfitting "
                "one batch on purpose, ignore this warning.",
                optimizer=o,
                details={
                    "since": first,
                    "steps": count,
                    "why": "not-fed",
                    "given_as": kind,
                    "drawn_for": drawn,
                    "loader_batches": record.length,
                    "iterator_yielded": record.yielded,
                },
            )
        )

    def _row(
        self,
        o: int,
        at: tuple[int, int],
        whole: tuple[float, ...] | None,
        parts: list[tuple[float, ...]],
    ) -> None:
        """One collected step: extend or restart the whole input's streak and each
        forward's (a forward's batch is followed by its checksum, not its place: a step that
        adds a forward now and then shifts the others), age the open episode, and ask the
        loaders about a streak long enough — a forward's only while the whole input does
        not repeat (then that says more). ``at``: the step and the run's step counter."""
        step, clock = at
        streak = self._whole.get(o)
        ended = []
        if whole is None:
            ended.append(self._whole.pop(o, None))
        elif streak is not None and streak.key == whole:
            streak.count += 1
        else:
            ended.append(streak)
            self._whole[o] = _Streak(whole, step, since=clock)
        before = self._parts.get(o, {})
        now: dict[tuple[float, ...], _Streak] = {}
        for j, key in enumerate(parts):
            if key in now:  # two forwards of one batch in a step (D(fake), D(fake.detach()))
                continue
            kept = before.get(key)
            if kept is not None:
                kept.count += 1
            now.setdefault(key, kept or _Streak(key, step, since=clock)).forward = j
        self._parts[o] = now
        ended += [s for k, s in before.items() if k not in now]
        longest = max((s.count for s in ended if s is not None), default=0)
        if longest > self._longest.get(o, 0):
            self._longest[o] = longest
        episode = self._open.get(o)
        if episode is not None:
            seen = episode.key == whole or episode.key in now
            episode.missing = 0 if seen else episode.missing + 1
            if episode.missing >= REPEAT_STEPS:
                del self._open[o]
                self.sink.clear(ID, None, o)
        streak = self._whole.get(o)
        repeats = streak is not None and streak.count >= REPEAT_STEPS
        due = [streak] if streak is not None and repeats else list(now.values())
        for s in due:
            if s.count >= REPEAT_STEPS and s.count >= 2 * s.asked:
                s.asked = s.count  # asked at 5, 10, 20, 40… steps of one batch
                s.forwards = len(parts)
                self._ask(o, s, step, clock)

    def _ask(self, o: int, streak: _Streak, step: int, clock: int) -> None:
        # patient: twice the repeat the check waits for, and twice the longest repeat this
        # optimizer's inputs made before (a batch reused on purpose ends at the same length)
        patient = streak.count >= 2 * max(REPEAT_STEPS, self._longest.get(o, 0))
        found = self.log.verdict(streak.since, clock, patient)
        if found is None:
            return
        why, record = found
        if any(e.key == streak.key for oo, e in self._open.items() if oo != o):
            self._open[o] = _Episode(streak.key)  # one batch, one finding: another model's
            return  # finding names it (four nets trained side by side on each batch)
        size = "an unknown number of" if record.length is None else f"{record.length:,}"
        checksum = f"{streak.key[0]:.6g}"
        if why == "new-iterator":
            cause = (
                "a new DataLoader iterator is made at every step and only its first batch is "
                f"used (the loader has {size} batches)"
            )
            hint = (
                "make the iterator once per epoch (for x, y in loader: …), or keep one "
                "iterator and call next() on it, making a new one when it is exhausted."
            )
        elif why == "not-fed":
            cause = (
                f"the loop draws a new batch at every step from a DataLoader of {size} "
                "batches, but the model is not fed what it draws (a batch kept from before "
                "the loop, a stale variable), or every sample of the dataset is the same"
            )
            hint = (
                "pass the batch the loop draws to the model; when overfitting one batch on "
                "purpose, ignore this warning."
            )
        else:
            cause = (
                f"the batch was drawn once from a DataLoader of {size} batches and no batch "
                "has been drawn since"
            )
            hint = (
                "draw a new batch inside the training loop (for x, y in loader: …); when "
                "overfitting one batch on purpose, ignore this warning."
            )
        if streak.forward == WHOLE:
            what = "the model has seen the same input batch"
        else:
            what = (
                f"forward {streak.forward + 1} of the model's {streak.forwards} per step has "
                "had the same input batch while the others' inputs change"
            )
        self._open[o] = _Episode(streak.key)
        self.sink.report(
            finding(
                ID,
                step,
                f"{what} on {streak.count} consecutive steps "
                f"(checksum {checksum}, since step {streak.first}): {cause}.",
                hint,
                optimizer=o,
                details={
                    "forward": None if streak.forward == WHOLE else streak.forward + 1,
                    "since": streak.first,
                    "steps": streak.count,
                    "checksum": list(streak.key),
                    "why": why,
                    "loader_batches": record.length,
                    "iterator_yielded": record.yielded,
                },
            )
        )
