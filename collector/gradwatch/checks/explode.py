"""``exploding-grad`` as a robust statistic of the whole gradient of one optimizer.

The check watches ‖g‖ over every tensor together, not each tensor: a tensor that is tiny
or starts near zero (a bias before a normalisation layer, a LayerNorm or first attention
layer growing to its normal level, a fresh head) can grow many times over while the
gradient as a whole does not, and clipping bounds the whole. A step explodes when its
whole norm is

* above ``EXPLODE_FACTOR`` times its rolling median and above ``EXPLODE_MADS`` robust
  standard deviations of the log-norm (median absolute deviation), *and* suddenly so:
  ``SUDDEN`` times the median of the last ``RECENT`` steps (a slow drift to a new level is
  training, not an explosion) — after ``MIN_HISTORY`` steps of evidence;
* before that, ``EARLY_FACTOR`` times the median of the steps so far;
* more than ``GROWTH`` times the previous step's at ``GROWTH_STEPS`` steps in a row;
* or its RMS per element is above ``RMS_EXPLODE``.

The first three are relative, and a relative change says nothing about a gradient that is
tiny against the weights it updates (a REINFORCE policy's gradient rising from 0.003 to
0.08, a GAN discriminator's oscillation): growth is judged from at least a floor tied to
the model's own scale, ``FLOOR_SHARE`` × ‖θ‖ before the first update. So no step whose
whole norm is below ``EXPLODE_FACTOR × FLOOR_SHARE`` = 10% of ‖θ‖ explodes: at a learning
rate of 1, such a gradient would move the weights by under a tenth of their size. Without
the parameter norms (``stats="grad-norms"``) there is no floor.

A one-off jump (the median and early rules) is harmful only through the update it makes:
an abnormally large change of the weights. So once the step's update is measured (every
step checked after its update, the usual path), a jump is an explosion only when that
update ‖Δθ‖/‖θ‖ is ``SUDDEN`` times the run's usual one (the median of the same steps as
the gradient history) and exceeds it by at least ``FLOOR_SHARE`` — the step moved the
weights by 1% of their norm more than a step usually does (:func:`large_update`) — or
when the step's input batch is an outlier on another scale
(:mod:`~gradwatch.checks.batchscale`): a data bug, whatever the optimizer makes of it
(Adam shrinks that update, but its second moment then holds the spike and stalls the
steps after it). An adaptive optimizer (Adam, RMSprop, Adagrad) divides a spike, or a
gradient that settles at a new level, by its running second moment, so its update stays
near the learning rate (the spikes of a policy gradient or of a GAN's discriminator under
Adam add well under 1%), while plain SGD passes the spike on in full. Persistent growth,
an absurd RMS and an overflowing norm need no such evidence; before the update (a
``raise``, ``skip`` or ``checkpoint`` policy acts then) the update is not known yet and
the gradient alone decides.

One finding per episode, naming the tensors whose own norm jumped most; the episode ends
after ``CALM_STEPS`` steps back near the median (hysteresis), so it never toggles.
"""

from __future__ import annotations

import math

import torch

from gradwatch.checks.findings import Action, FindingSink, finding
from gradwatch.checks.fmt import num, times
from gradwatch.checks.numstate import WINDOW, State
from gradwatch.checks.view import StepView, held_for_rows
from gradwatch.core import checkids

MIN_HISTORY = 20
MEDIAN_EVERY = 10  # the rolling median is recomputed every this many steps
EXPLODE_FACTOR, EXPLODE_MADS = 10.0, 6.0
SUDDEN, RECENT = 4.0, 5
EARLY_FACTOR = 1e3
GROWTH, GROWTH_STEPS = 2.0, 5
RMS_EXPLODE = 1e6
CALM_FACTOR, CALM_MADS, CALM_STEPS = 3.0, 3.0, 5
FLOOR_SHARE = 1e-2  # growth is judged from at least this share of ‖θ‖ (see above)
STRUCTURAL_ZERO = 1e-4  # RMS below this fraction of the largest one: zero up to rounding
LISTED = 4  # tensors named in a message
_MAD_TO_SD = 1.4826

Reason = tuple[str, float]  # (what flagged the step, the baseline whole norm)


def moves(update_norm: torch.Tensor, param_norm: torch.Tensor) -> torch.Tensor:
    """The whole update ‖Δθ‖/‖θ‖ (‖θ‖ after it) of each row (rows × tensors, or one row:
    one value); NaN where not measured (``stats="grad-norms"``)."""
    moved = update_norm.square().sum(dim=-1).sqrt()
    size = param_norm.square().sum(dim=-1).sqrt()
    return torch.where(size > 0, moved / size, torch.where(moved > 0, math.inf, 0.0)).reshape(-1)


def large_update(state: State, move: float) -> bool:
    """Whether a step whose whole update is ``move`` (‖Δθ‖/‖θ‖) was abnormally large: at
    least ``SUDDEN`` times the usual step of the history (the median) *and* larger than it
    by ``FLOOR_SHARE`` of the weights' norm; ``True`` when the update is not known (NaN:
    the gradient alone decides) or not finite."""
    if not math.isfinite(move):
        return True
    n = min(state.filled, WINDOW)
    usual = float(state.moves[:n].nanmedian()) if n else 0.0
    usual = usual if math.isfinite(usual) else 0.0
    return move >= max(SUDDEN * usual, usual + FLOOR_SHARE)


#: the rules that a one-off jump triggers (judged by their update when it is known)
JUMPS = frozenset({"median", "early"})


def totals(grad_norm: torch.Tensor) -> torch.Tensor:
    """The whole gradient norm of each row (rows × tensors)."""
    return grad_norm.square().sum(dim=1).sqrt()


def floor_of(param_norm: torch.Tensor | None) -> float:
    """The log floor of the whole gradient norm that can explode, from the per-tensor
    ‖θ‖ before the first update (``-inf`` when unknown or not finite)."""
    if param_norm is None:
        return -math.inf
    whole = float(param_norm.to("cpu", torch.float64).square().sum().sqrt())
    if not math.isfinite(whole) or whole <= 0:
        return -math.inf
    return math.log(EXPLODE_FACTOR * FLOOR_SHARE * whole)


def _floor(state: State) -> float:
    return -math.inf if state.floor is None else state.floor


def refresh(state: State) -> None:
    """Recompute the rolling medians when due (none yet, or the history just reached a
    multiple of ``MEDIAN_EVERY``), once the history has ``MIN_HISTORY`` steps."""
    if state.filled < MIN_HISTORY:
        return
    if not state.refreshed or state.filled % MEDIAN_EVERY == 0:
        # the per-tensor medians are taken only for a finding's message (``_jumped``)
        state.refreshed = True
        logs = state.totals[: min(state.filled, WINDOW)]
        center = logs.median()
        state.center = float(center)
        state.scale = float((logs - center).abs().median()) * _MAD_TO_SD


def _recent(state: State) -> torch.Tensor:
    """The log whole norms of the last ``RECENT`` steps (the history holds at least that)."""
    idx = [(state.filled - RECENT + k) % WINDOW for k in range(RECENT)]
    return state.totals[idx]


def _high(state: State, logs: torch.Tensor) -> torch.Tensor:
    """Log norms far above the rolling median."""
    high = state.center + max(math.log(EXPLODE_FACTOR), EXPLODE_MADS * state.scale)
    return logs > max(high, _floor(state))


def _above(state: State, logs: torch.Tensor, recent: torch.Tensor) -> torch.Tensor:
    """Log norms far above the rolling median and ``SUDDEN``× above the recent median."""
    return _high(state, logs) & (logs > recent + math.log(SUDDEN))


def _push(
    state: State,
    norms: torch.Tensor,
    logs: torch.Tensor,
    last: float,
    moved: torch.Tensor | None = None,
) -> None:
    """Append rows (never across the end of the ring) to the histories (``moved``: their
    whole updates, :func:`moves`; NaN when not given)."""
    at = state.filled % WINDOW
    state.history[at : at + len(norms)] = norms
    state.totals[at : at + len(norms)] = logs
    state.moves[at : at + len(norms)] = math.nan if moved is None else moved
    state.filled += len(norms)
    state.last = last


def flag(state: State, total: torch.Tensor) -> Reason | None:
    """Why the whole norm ``total`` (one value, in a tensor) of the next step explodes,
    given the history before it; ``None`` when it does not."""
    refresh(state)
    value = float(total[0])
    if not math.isfinite(value) or value <= 0:
        return None  # nonfinite-grad's finding, or no gradient at all
    if value / state.sqrt_total > RMS_EXPLODE:
        return "rms", value
    if math.log(value) <= _floor(state):
        return None  # small against the weights: no growth makes it explode
    if state.last is not None and value > GROWTH * state.last and state.growth + 1 >= GROWTH_STEPS:
        return "growth", state.last
    if state.filled == 0:
        return None
    if state.filled < MIN_HISTORY:
        early = state.totals[: state.filled].median()
        return (
            ("early", math.exp(early))
            if bool(total.log()[0] > early + math.log(EARLY_FACTOR))
            else None
        )
    recent = _recent(state).median().unsqueeze(0)
    return (
        ("median", math.exp(state.center)) if bool(_above(state, total.log(), recent)[0]) else None
    )


def observe(state: State, norms: torch.Tensor, total: torch.Tensor, move: float = math.nan) -> None:
    """Add one step (its per-tensor norms, whole norm and whole update ``move``) to the
    histories when finite."""
    value = float(total[0])
    finite = math.isfinite(value) and value > 0 and bool(torch.isfinite(norms).all())
    grew = finite and state.last is not None and value > GROWTH * state.last
    state.growth = state.growth + 1 if grew else 0
    if finite:
        _push(state, norms.unsqueeze(0), total.log(), value, torch.tensor([move]))


def calm(state: State, value: float) -> bool:
    """Whether a whole norm is back near the usual level (ends an episode)."""
    if not math.isfinite(value):
        return False
    if state.filled < MIN_HISTORY:
        n = max(state.filled, 1)
        return value <= CALM_FACTOR * math.exp(float(state.totals[:n].median()))
    if value <= 0.0:  # every gradient exactly zero: calm (param-no-grad says it)
        return True
    return math.log(value) <= state.center + max(math.log(CALM_FACTOR), CALM_MADS * state.scale)


def take_rows(state: State, g: torch.Tensor, moved: torch.Tensor | None = None) -> int:
    """Rows of finite per-tensor norms (``g``: rows × tensors; ``moved``: each row's whole
    update, :func:`moves`) on which :func:`flag` finds nothing, added to the histories at
    once; returns how many were taken (the first flagged row stops them and takes the
    reference path)."""
    tot = totals(g)
    stop = len(tot)
    bad = ~torch.isfinite(tot) | (tot <= 0) | (tot / state.sqrt_total > RMS_EXPLODE)
    last = torch.tensor([state.last if state.last is not None else math.inf])
    grew = tot > GROWTH * torch.cat([last, tot[:-1]])
    streak: torch.Tensor | None = None  # None: no growth streak in these rows (the usual)
    if state.growth or bool(grew.any()):
        streak = held_for_rows(torch.tensor([state.growth]), grew.unsqueeze(1))[:, 0]
        bad |= (streak >= GROWTH_STEPS) & (tot.log() > _floor(state))
    if bool(bad.any()):
        stop = int(bad.nonzero()[0])
    j = 0
    while j < stop:
        filled = state.filled
        if filled < MIN_HISTORY:  # early steps: one at a time, each against all before it
            if j:
                state.growth = 0 if streak is None else int(streak[j - 1])
            if flag(state, tot[j : j + 1]) is not None:
                break
            _push(state, g[j : j + 1], tot[j : j + 1].log(), float(tot[j]), _rows(moved, j, j + 1))
            j += 1
            continue
        refresh(state)
        end = min(stop, j + MEDIAN_EVERY - filled % MEDIAN_EVERY)
        logs = tot[j:end].log()
        cut = len(logs)
        if bool(_high(state, logs).any()):  # only then is the recent median needed
            ring = torch.cat([_recent(state), logs[:-1]])
            flagged = _above(state, logs, ring.unfold(0, RECENT, 1).median(dim=1).values)
            cut = int(flagged.nonzero()[0]) if bool(flagged.any()) else cut
        if cut:
            end_norm = float(tot[j + cut - 1])
            _push(state, g[j : j + cut], logs[:cut], end_norm, _rows(moved, j, j + cut))
        j += cut
        if cut < len(logs):
            break
    if j:
        state.growth = 0 if streak is None else int(streak[j - 1])
    return j


def _rows(moved: torch.Tensor | None, start: int, end: int) -> torch.Tensor | None:
    return None if moved is None else moved[start:end]


def report(sink: FindingSink, v: StepView, state: State, reason: Reason, total: float) -> Action:
    """The finding of an exploding step (one per episode: later steps repeat its key)."""
    assert v.grad_norm is not None
    names, details = _jumped(v, state)
    if state.exploding is None:
        state.exploding = names[0][0] if names else v.names[v.order[0]] if v.order else None
    kind, base = reason
    listed = ", ".join(f"{n} ({times(r)})" for n, r in names[:LISTED])
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    span = min(state.filled, WINDOW)
    what = {
        "rms": f"its RMS per element is {num(total / state.sqrt_total)}",
        "growth": f"it more than doubled at each of the last {GROWTH_STEPS} steps",
        "early": f"{times(total / base)} the median of the first {span} steps ({num(base)})",
        "median": f"{times(total / base)} its median of the last {span} steps ({num(base)})",
        "overflow": "beyond what float32 can hold although every element is finite",
    }[kind]
    return sink.report(
        finding(
            checkids.EXPLODING_GRAD,
            v.step,
            f"the gradient norm jumped to {num(total)}, {what}"
            + (f"; the tensors that jumped: {listed}{more}." if listed else "."),
            "lower the learning rate, add warm-up or clip gradients "
            "(torch.nn.utils.clip_grad_norm_); check the batch of this step.",
            param=state.exploding,
            optimizer=v.optimizer,
            details={
                "grad_norm": total,
                "rolling_median": base if kind in ("median", "early") else None,
                "reason": kind,
                "tensors": details,
            },
        )
    )


def _jumped(v: StepView, state: State) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Tensors whose own norm jumped ``EXPLODE_FACTOR``× above their median (forward
    order), leaving out those that are zero up to rounding; at least the largest jump."""
    assert v.grad_norm is not None
    g = v.grad_norm
    n = min(state.filled, WINDOW)
    if n == 0:
        return [], {}
    median = state.history[:n].median(dim=0).values
    ratio = torch.where(median > 0, g / median, 0.0)
    rms = g / state.sqrt_numel
    finite = torch.isfinite(rms)
    top = float(rms[finite].max()) if bool(finite.any()) else 0.0
    ratio = torch.where(finite & (rms >= STRUCTURAL_ZERO * top), ratio, 0.0)
    big = [i for i in v.order if float(ratio[i]) >= EXPLODE_FACTOR]
    if not big and float(ratio.max()) > 0:
        big = [int(ratio.argmax())]
    out = [(v.names[i], float(ratio[i])) for i in big]
    return out, dict(out)
