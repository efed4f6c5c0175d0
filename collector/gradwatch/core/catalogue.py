"""The catalogue of check ids, their default severities and the policies a user can set.

The ids are a public interface (findings, CLI, config, dashboard): never rename one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from gradwatch.core.contract import Severity

Policy = Literal["off", "record", "warn", "raise", "skip", "checkpoint"]

POLICIES: Final[tuple[Policy, ...]] = ("off", "record", "warn", "raise", "skip", "checkpoint")


@dataclass(frozen=True)
class Check:
    """One check as documented in ``docs/checks.md`` (generated from :data:`CATALOGUE`).

    ``thresholds`` may name the code's own constants as ``{module.NAME}`` (a module of
    ``gradwatch.checks``, or ``envelope``/``stepcheck``), filled in by the generator, so
    the page shows the values the code uses."""

    id: str
    section: str
    severity: Severity
    definition: str
    thresholds: str
    quiet_on: str


_C = Check
#: Every check, in the order of the documentation. The ids are a public interface.
CATALOGUE: Final[tuple[Check, ...]] = (
    _C("stale-grad", "Optimizer lifecycle", "error",
       "`step()` applies gradients summed over more backward passes than the declared "
       "accumulation: a missing `zero_grad()`.",
       "backward passes since the last clearing > `accumulation_steps` (default 1); one "
       "finding per optimizer and run (the loop's code does not change: a return is the same "
       "bug)",
       "gradient accumulation declared with `accumulation_steps` / `--accumulation-steps`; "
       "closures (LBFGS)"),
    _C("grad-zeroed-before-step", "Optimizer lifecycle", "error",
       "Gradients were cleared after the last `backward()` and before `step()`: the step "
       "applies nothing.",
       "a clearing event after the step's last backward pass; one finding per optimizer and "
       "run",
       "`zero_grad()` before `backward()` or right after `step()`"),
    _C("step-without-backward", "Optimizer lifecycle", "warning",
       "`step()` ran with no `backward()` since the previous step (a backward that reached "
       "no parameter is `param-no-grad`, not this).",
       "zero backward passes since the previous step; one finding per optimizer and run (a "
       "`step()` twice per backward holds every other step)",
       "closures (LBFGS); schedulers and optimizers stepped as the loop intends"),
    _C("clip-before-backward", "Optimizer lifecycle", "warning",
       "`clip_grad_norm_` / `clip_grad_value_` ran on the optimizer's parameters before the "
       "step's `backward()` and not after it: it clips the previous step's gradients (or "
       "none, after `zero_grad(set_to_none=True)`) and the step applies unclipped ones.",
       "every clip of a step before its last backward pass, at {clipping.CLIP_STEPS} steps of "
       "the run; the episode ends at a step that clips after its backward",
       "clipping after `backward()` (also after `GradScaler.unscale_`), after each "
       "micro-batch's backward with gradient accumulation, inside `step(closure)`; clipping "
       "another model's parameters"),
    _C("accumulation-wiped", "Optimizer lifecycle", "error",
       "Gradients of backward passes were cleared before any `step()` applied them "
       "(`zero_grad()` every micro-batch, `step()` every k): each step applies only the last "
       "micro-batch. The same id as the `gradwatch lint` rule.",
       "discarded backward passes at 2 steps in a row",
       "clears inside `step(closure)` (LBFGS, Lightning); gradients another optimizer applied "
       "(GANs); iterations a GradScaler skipped; correct accumulation; gradients used by "
       "hand before the clear (the parameters changed in place since the backward pass: "
       "sharpness-aware minimisation's first pass, also as a wrapper optimizer whose "
       "`zero_grad` clears the inner optimizer's gradients; a manual update)"),
    _C("param-no-grad", "Parameter coverage", "warning",
       "A trainable parameter is cut off from the loss: its module runs in the training "
       "forward, yet it has never had a non-zero gradient (a graph break: `detach`, "
       "`.item()`, `torch.tensor(t)`, `no_grad`). A gradient that exists but is exactly "
       "zero is named with both causes (cut off, or nothing flows back: dead activations, a "
       "zero layer after it, underflow); but a module's `bias` with an exactly zero "
       "gradient while the rest of its module gets one is not cut off: the loss does not "
       "change under a constant shift of that output (a difference of means, as in a "
       "Wasserstein or relativistic critic's last layer): `info` once, and it counts as "
       "trained. A parameter whose module never ran is unused: "
       "`info` once. Every gradient of an optimizer present but exactly zero (a clip value of "
       "0, a mask that zeroes everything) is an `error`: nothing trains. A `backward()` that "
       "reached no watched parameter at all is one `error` finding naming the break; so is, "
       "once per run, a `backward()` from a leaf loss (rebuilt from `.item()` with "
       "`requires_grad=True` set by hand) in a step whose other passes do train. One "
       "finding per episode lists the tensors (count and the first names, in forward "
       "order).",
       "never a non-zero gradient while its module ran (or its gradient existed) "
       "{coverage.PERSIST_STEPS} steps in a row; unused: none for {coverage.UNUSED_STEPS} "
       "steps; all zero: every gradient exactly zero {coverage.PERSIST_STEPS} steps in a row "
       "after a backward; the episode ends after {coverage.EPISODE_CALM} steps without any",
       "conditional computation — a parameter that has had a gradient before (experts a "
       "top-1 router leaves idle, task heads used in turn, layers frozen by `no_grad` after "
       "warm-up); modules that do not run (info at most); some tensors with exactly zero "
       "gradients while others train; a bias the loss is invariant to (info); frozen "
       "parameters"),
    _C("param-not-in-optimizer", "Parameter coverage", "error",
       "A trainable parameter of the watched model is in no optimizer param group (a layer "
       "replaced after the optimizer was built); also an `nn.Parameter` the loss reaches "
       "that no watched model and no optimizer holds (layers in a plain list or dict, "
       "parameters made in `forward`), with shapes and the module holding it. One finding "
       "lists them all.",
       "checked at the start and every {checks.COVERAGE_EVERY} steps",
       "parameters with `requires_grad=False`; a complete copy of a watched model (same "
       "class and parameter shapes) that feeds a loss which also trains the model — a "
       "target network or EMA copy — is `info`, said as such; so is, by the same test, a "
       "submodule of a watched model that copies a trained one (a `target_net` beside "
       "`net`) when the loss does not reach it (no gradient after the first backward; one "
       "it reaches is a layer left out, an `error` at step 1: identical blocks share "
       "shapes); and a base left trainable under adapters — the optimizer holds exactly "
       "the parameters of the model's registered parametrizations (LoRA as minLoRA adds "
       "it) — is `info` with the advice to call `requires_grad_(False)` on it"),
    _C("frozen-param-in-optimizer", "Parameter coverage", "warning",
       "A parameter with `requires_grad=False` sits in an optimizer and never trains "
       "(`info` while frozen; `warning` once frozen past the horizon); one finding per "
       "severity lists the tensors.",
       "warning after {coverage.FROZEN_HORIZON} steps frozen",
       "progressive unfreezing within the horizon"),
    _C("param-not-updated", "Parameter coverage", "warning",
       "A parameter with a non-zero gradient did not change at `step()`; one finding per "
       "episode lists the tensors. When their group's learning rate has collapsed, "
       "`lr-collapse` is reported first, at the same step, and this finding is its "
       "consequence.",
       "unchanged for {coverage.PERSIST_STEPS} steps in a row; the episode ends after "
       "{coverage.EPISODE_CALM} steps without any",
       "zero gradients; optimizers that skip a step on purpose (GradScaler overflow); "
       "updates below the tensor's float resolution because its learning rate fell (a "
       "schedule ending near zero): the tensor's latest non-zero update, scaled by how "
       "much its rate has fallen since, is at most `eps(dtype) · ‖θ‖` (a tensor that "
       "never moved, or a rate of exactly 0, is no such evidence)"),
    _C("frozen-param-changed", "Parameter coverage", "warning",
       "A parameter with `requires_grad=False` changed value (weight decay or momentum on a "
       "frozen tensor); one finding lists the tensors.",
       "a non-zero update norm at a step",
       "tensors unfrozen before the change"),
    _C("param-mutated-outside-step", "Parameter coverage", "info",
       "A parameter changed between two steps without an optimizer step (in-place `.data` "
       "edits, EMA copies, manual clipping of weights); one finding per episode lists the "
       "tensors.",
       "compared every {stepcheck.MUTATION_EVERY} collected steps",
       "nothing: it is `info` because EMA and weight clipping are often intended"),
    _C("nonfinite-loss", "Numerics", "error",
       "The loss is NaN or ±Inf; NaN provenance names the module and operation that made "
       "the first non-finite value.",
       "any non-finite loss",
       "steps a GradScaler skipped (that is `amp-overflow`)"),
    _C("nonfinite-grad", "Numerics", "error",
       "NaN or ±Inf in gradients: the first step, the first tensor in forward order, and "
       "per-tensor counts.",
       "any non-finite gradient element",
       "overflow steps skipped by a GradScaler (`amp-overflow`)"),
    _C("nonfinite-param", "Numerics", "error",
       "NaN or ±Inf in parameters after `step()`.",
       "any non-finite parameter element",
       "nothing"),
    _C("amp-overflow", "Numerics", "info",
       "A GradScaler skipped steps because of inf/NaN gradients: `info` per skip, `warning` "
       "when persistent, `error` when the scale collapses.",
       "warning after {amp.CONSECUTIVE_WARN} consecutive skips or more than "
       "{amp.RATE_WARN:.0%} of the last {amp.RATE_WINDOW} steps; error when the scale is ≤ 1",
       "the occasional skip while the scale settles"),
    _C("exploding-grad", "Numerics", "warning",
       "The whole gradient norm (all tensors together) jumped far above its own recent "
       "level, or is absurdly large (also a norm that overflows float32 while every element "
       "is finite); one finding per episode lists the tensors that jumped. Growth is judged "
       "from at least a floor tied to the model's own scale (1% of ‖θ‖ before the first "
       "update): a gradient below 10× that floor (10% of ‖θ‖) would move the weights by "
       "under a tenth of their size even at a learning rate of 1, so no relative rise of it "
       "is an explosion. A one-off jump is harmful only through the update it makes: once "
       "the step's update is measured (after the update, the usual path), a jump is an "
       "explosion only when that step moved the weights (‖Δθ‖/‖θ‖ of the whole) "
       "4× as far as the run's usual step and by at least 1% of their norm "
       "more, or its input batch is an outlier "
       "on another scale. Adam, RMSprop and Adagrad divide a spike by their running RMS, so "
       "a spike under them moves the weights by about the usual step; plain SGD passes it on "
       "in full. Persistent growth, an absurd RMS and an overflowing norm need no such "
       "evidence; a raise/skip/checkpoint policy acts before the update, on the gradient "
       "alone.",
       "after {explode.MIN_HISTORY} steps: > {explode.EXPLODE_FACTOR:g}× its rolling median, "
       "> {explode.EXPLODE_MADS:g} robust deviations of the log-norm above it and > "
       "{explode.SUDDEN:g}× the median of the last {explode.RECENT} steps; before that "
       "> {explode.EARLY_FACTOR:g}× the median so far; or > {explode.GROWTH:g}× the previous "
       "step's at {explode.GROWTH_STEPS} steps in a row — each only above the floor, and a "
       "one-off jump (median or early rule) only with its update ‖Δθ‖/‖θ‖ ≥ "
       "{explode.SUDDEN:g}× the usual one and ≥ the usual one + {explode.FLOOR_SHARE:g} "
       "(when measured), or with an outlier input batch; or RMS > "
       "{explode.RMS_EXPLODE:g}; the episode ends after {explode.CALM_STEPS} calm steps",
       "noisy mini-batches; tiny layers, biases before BatchNorm and LayerNorm gradients "
       "growing to a new normal level (a slow drift is not a jump); clipped runs; a tiny "
       "gradient rising many-fold while small against the weights (REINFORCE's early "
       "policy gradient, a GAN's oscillation); gradient spikes that an adaptive optimizer "
       "absorbs (policy-gradient/actor-critic/PPO return spikes, a GAN discriminator's "
       "oscillation, a ResNet's noisy steps under Adam: the update stays under "
       "1% of ‖θ‖ above its usual size)"),
    _C("vanishing-grad", "Numerics", "warning",
       "Gradients too small to train *and* weights that stand still: a vanishing gradient "
       "is harmful only when the parameters stop moving, so each step needs two pieces of "
       "evidence — the gradient (a tensor's RMS, or the first weight matrix's norm against "
       "the last one's) and the update it made (‖Δθ‖/‖θ‖ after the update tiny: a slow "
       "layer that still moves is training). Adam, RMSprop and "
       "Adagrad rescale tiny gradients and keep the weights moving, so a tiny gradient "
       "alone is no finding. Judged after the update (on gradwatch's writer thread). One "
       "finding per episode lists the tensors.",
       "RMS < {numerics.RMS_VANISH:g}, or first/last layer gradient ratio < "
       "{numerics.FIRST_LAST_RATIO:g}, with ‖Δθ‖ ≤ {numerics.STILL:g}×‖θ‖ at each of "
       "{numerics.VANISH_STEPS} steps in a row; the episode ends after "
       "{numerics.VANISH_STEPS} steps without",
       "tensors whose RMS is below {numerics.STRUCTURAL_ZERO:g}× the largest (zero up to "
       "rounding); a loss fallen to {numerics.CONVERGED:g}× the run's first or less (a "
       "memorised batch, a converged fit: every gradient shrinks with the loss); tiny "
       "gradients that an adaptive optimizer rescales (a GAN generator's first steps, a "
       "deep net's first layers under Adam); conditional computation (mixture-of-experts "
       "experts the gate rarely picks: a real gradient now and then breaks the streak, "
       "and Adam keeps them moving); a start-of-training transient shorter than "
       "{numerics.VANISH_STEPS} steps"),
    _C("update-ratio", "Numerics", "warning",
       "Updates far too large for the weights they change, ‖Δθ‖/‖θ before the update‖, step "
       "after step (a learning rate far too high); one finding per level and episode.",
       "warning above {ratio.LEVELS[0][1]:g}× for {ratio.LEVELS[0][2]} steps; error above "
       "{ratio.LEVELS[1][1]:g}× for {ratio.LEVELS[1][2]} steps; the episode ends after "
       "{ratio.CALM_STEPS} calm steps",
       "small updates (fine-tuning, deep nets, decayed learning rates, embeddings whose rows "
       "move only when their tokens appear): too small is `lr-collapse` or "
       "`param-not-updated`"),
    _C("lr-jump", "Learning rate", "warning",
       "A param group's learning rate rose at one step far above any value it had before "
       "(0.01 → 10,000); the finding names the group, the values and the scheduler.",
       "> {lr.JUMP_FACTOR:g}× its earlier peak, after {lr.JUMP_MIN_STEPS} steps with a "
       "positive learning rate",
       "warm-up, OneCycle, cyclic schedules and warm restarts (they never pass their own "
       "earlier peak by that much)"),
    _C("lr-collapse", "Learning rate", "warning",
       "A param group's learning rate fell to about zero long before the run ends (a "
       "scheduler sized in epochs stepped every batch); names the group, the values and the "
       "scheduler.",
       "below {lr.COLLAPSE_FACTOR:g}× its peak for {lr.COLLAPSE_MIN_STEPS} steps and for "
       "{lr.COLLAPSE_SHARE:g} of the steps before it fell there; or, earlier, at that level "
       "when tensors of the group stop changing at all (`param-not-updated`, then its "
       "consequence)",
       "step, cosine, linear and exponential decay over the run, OneCycle, "
       "ReduceLROnPlateau, constant learning rates"),
    _C("lr-too-large", "Learning rate", "warning",
       "Under Adam and its family (AdamW, NAdam, RAdam, Adamax, SparseAdam, Lion) every "
       "weight moves by about the learning rate at each step, whatever the gradient's scale; "
       "a param group's rate far above the typical size of its weights overwrites them within "
       "a few steps, which gradient clipping and Adam's normalisation hide from the other "
       "checks. The finding names the group, the rate (or the peak its scheduler was built "
       "for), the weights' size and the optimizer. When the loss then diverges "
       "(`loss-diverging`) or turns non-finite, the rate is shown to break training: the "
       "finding is repeated as an `error` (same incident), so `--fail-on error` fails the run. "
       "Adadelta sizes its steps itself and its rate multiplies them (natural value 1): above "
       "1 each update outgrows the ones before, so its rate is compared with 1.",
       "rate > {lrscale.FACTOR:g}× the median RMS, before the first update, of the group's "
       "non-zero trainable weight matrices; checked at every collected step and against the "
       "scheduler's `initial_lr`/`max_lr` at the first; one finding per optimizer; error: a "
       "divergence or non-finite loss after it",
       "from-scratch rates (1e-4…1e-2 on usual initialisations), fine-tuning rates, warm-up, "
       "zero-initialised matrices, biases and norm weights (no size to compare with), SGD and "
       "other optimizers whose step scales with the gradient (a large SGD rate on a small net "
       "is normal), D-Adaptation/Prodigy (their rate is a multiplier); Adadelta at a rate up to "
       "{lrscale.FACTOR:g}"),
    _C("loss-shape-mismatch", "Loss and data", "error",
       "An element-wise loss (MSE, L1, SmoothL1, Huber, BCE…) got input and target of "
       "different shapes that broadcast, e.g. `(N,1)` vs `(N,)`.",
       "any broadcasting shape pair at the loss call",
       "equal shapes; losses that reduce over classes (cross-entropy)"),
    _C("repeated-batch", "Loss and data", "warning",
       "The model got the same input batch (the same batch checksum) on consecutive steps, "
       "and the DataLoaders say why: a new iterator made at about every step and left after "
       "its first batch (`next(iter(loader))` in the loop, `shuffle=False`); one batch "
       "drawn before the loop from a loader of several batches and none since; or a loader "
       "walked a batch per step while the model's input stays the same (what the loop draws "
       "never reaches the model, or every sample of the dataset is identical). A step of "
       "several forwards is also checked forward by forward: one input that repeats while "
       "the others change (a GAN discriminator's real batch next to fresh fakes).",
       "{repeated.REPEAT_STEPS} collected steps in a row with one checksum (asked again at "
       "twice as many); a loader of 2 or more batches (or of unknown length); one finding "
       "until {repeated.REPEAT_STEPS} steps in a row go without the repeated batch",
       "full-batch training on a fixed tensor (no DataLoader), loaders of one batch (epochs "
       "of one batch), loaders walked to their end (concatenated into one tensor, a full "
       "validation pass); batches drawn with gradients disabled; a batch drawn before "
       "`watch()` in a script that calls it by hand (`gradwatch run` sees it)"),
    _C("loss-at-chance", "Loss and data", "warning",
       "A classification loss (`cross_entropy`, `nll_loss`, their modules) stays at ln C, "
       "the loss of guessing uniformly among its C classes, while the parameters change: "
       "inputs and labels are not paired (shuffled with two permutations, labels from "
       "another batch), or the loss is given softmax probabilities instead of logits (a "
       "Softmax before `CrossEntropyLoss`: every input lies in [0, 1] and the loss can "
       "barely leave ln C), which the finding then names as the cause (the input's autograd "
       "node is a softmax). C is read from the logits' shape; the loss is the one gradwatch "
       "records per step.",
       "after {chance.WARMUP} steps, every mean of {chance.CHUNK} losses of the last "
       "{chance.WINDOW} steps above ln C less {chance.BAND:.0%} (above it by any amount: a "
       "model fitting labels without information only rises above ln C), the mean of each "
       "half of the window within {chance.BAND:.0%} of ln C and the second half no more "
       "than half that below the first (level), each step with an update",
       "shorter runs and the first {chance.WARMUP} steps; a loss that goes below the band "
       "(it learns), or declines through ln C across the window (a slow learner); "
       "imbalanced labels whose loss sits at the prior's entropy more than "
       "{chance.BAND:.0%} below ln C; label smoothing whose floor is within twice the band "
       "of ln C; soft targets, `reduction='sum'`, losses of several class counts; steps "
       "without an update; contrastive losses whose classes are the batch's own rows "
       "(N x N or N x (N-1) logits on every call, as SimCLR's and CLIP's: labels the loss "
       "builds itself cannot be unpaired; a classifier whose batch size is C or C + 1 on "
       "every step reads the same and is not checked)"),
    _C("loss-diverging", "Loss and data", "warning",
       "The model gets worse at its task because of the optimisation: the loss blew up, or "
       "it rose far above its best level and stayed there while the updates threw the "
       "weights away; one finding per episode. A rise alone is not that evidence: the loss "
       "of a changing objective moves while the weights move at their usual pace (RL value "
       "targets and episode sums grow as the policy improves, a curriculum's data gets "
       "harder, every meta-learning step is a new task). A rate that breaks training, unlike "
       "a changing objective, moves the weights by many times their own size within a few "
       "dozen steps (healthy updates are a small fraction of the weights: `update-ratio`).",
       "after {loss.DIVERGE_MIN_STEPS} steps: median of {loss.SMOOTH} losses ≥ "
       "{loss.DIVERGE_FIRST_FACTOR:g}× the first loss (at once), or ≥ "
       "{loss.DIVERGE_FACTOR:g}× its best (the lowest such median) and "
       "{loss.NOISE_MADS:g} MADs above it for {loss.DIVERGE_PERSIST} losses in a row while "
       "the update norms of those steps add up to ≥ {loss.RUNAWAY:g}× the weights' norm at "
       "their start (or are non-finite)",
       "noisy mini-batch losses within {loss.NOISE_MADS:g} MADs; bursts of heavy-tailed "
       "losses (polynomial features, outlier-rich batches) that settle within "
       "{loss.DIVERGE_PERSIST} losses; a loss that rises with its objective while the weights "
       "keep their pace (actor-critic and DQN returns, a curriculum of rising noise, fresh "
       "tasks after fine-tuning on one: the corpus's correct programs move their weights by "
       "at most 0.84× their norm in {loss.DIVERGE_PERSIST} steps); a divergence that has not "
       "yet moved the weights is found at {loss.DIVERGE_FIRST_FACTOR:g}× the first loss or "
       "when the loss turns non-finite (`nonfinite-loss`)"),
    _C("loss-plateau", "Loss and data", "info",
       "The loss stopped changing at all.",
       "range < {loss.PLATEAU_RANGE:g} of the loss's size (absolute below 1) over "
       "{loss.PLATEAU_STEPS} steps",
       "losses that still move"),
    _C("eval-mode-training", "Loss and data", "warning",
       "The model, or a dropout layer on the gradient's path, is in `eval()` while backward "
       "and step run: dropout is off. Normalisation layers alone in eval under a training "
       "model (frozen running statistics, a common fine-tuning choice) are `info`, named so.",
       "the root module in eval, or a relevant dropout layer in eval, at a step; one finding "
       "until every watched model trains again (a generator in eval next to a discriminator "
       "in train is one finding)",
       "BatchNorm kept in eval while the rest trains (info); frozen norm layers without "
       "trainable parameters, and parameter-free norm/dropout layers before every trainable "
       "parameter of their parent (a frozen backbone kept in eval() for feature extraction)"),
    _C("nondeterminism-risk", "Reproducibility", "info",
       "The fingerprint shows settings that make replicates differ (determinism off on an "
       "accelerator, cuDNN benchmark, unseeded DataLoader workers, no seed).",
       "read once at the start",
       "runs that set seeds and deterministic algorithms"),
    _C("repro-drift", "Reproducibility", "warning",
       "A replicate (same config and code hash) diverged from its reference: first step, "
       "first metric and tensor, and the cause (environment, config, code, init, data-order, "
       "forward-nondeterminism, backward-nondeterminism, optimizer-nondeterminism).",
       "the first bitwise difference (computed by the server or `gradwatch compare`)",
       "runs with different seeds (those form a seed sweep)"),
    _C("seed-envelope", "Reproducibility", "warning",
       "In a seed sweep, a run leaves the group's envelope.",
       "robust z-score > 4 on the loss, with at least {envelope.MIN_RUNS} runs",
       "groups of fewer than {envelope.MIN_RUNS} runs"),
    _C("ddp-param-desync", "Distributed", "error",
       "Parameter checksums differ across the ranks of one DDP job.",
       "any difference at a comparison (every `ddp_every` steps)",
       "ranks that agree bit for bit"),
    _C("ddp-rank-spread", "Distributed", "warning",
       "Per-rank loss or gradient norm differ by a large factor.",
       "spread > {ddp.SPREAD:g}× (values above {ddp.SPREAD_FLOOR:g})",
       "values below {ddp.SPREAD_FLOOR:g} on every rank"),
    _C("ddp-nonfinite-rank", "Distributed", "error",
       "The first rank (and host) that produced NaN/Inf.",
       "any non-finite loss, gradient or parameter on a rank",
       "nothing"),
    _C("structure-change", "Structure", "info",
       "The run's structure changed for good at a step (stored by the collector when the "
       "run closes, see [structure.md](structure.md)): a lifecycle event (zero_grad, a "
       "clip, a scheduler step) stops or starts, a tensor stops or starts receiving "
       "gradients, a module enters or leaves eval(), a param group's non-LR "
       "hyperparameter, the dtypes, the autocast state of the training forward, the "
       "schedulers' groups or the GradScaler's part change (autocast switched off is a "
       "change, not a safeguard dropped).",
       "the {timeline.WINDOW} steps before and from the step share no value (fewer at the "
       "run's edges, never fewer than {timeline.SETTLE}); a state value held "
       "{timeline.SETTLE} steps on each side",
       "periodic patterns (accumulation, alternating heads, GAN n_critic, evaluation every N "
       "steps with train() restored, a per-epoch scheduler); a hyperparameter a schedule "
       "moves on every step"),
    _C("structure-safeguard", "Structure", "warning",
       "A safeguard the run relied on stops for the rest of the run: the clipping call or "
       "the scheduler step is no longer made, or a dropout/normalisation module (or the "
       "model) that trained in train() stays in eval() to the end. Stored by the collector "
       "when the run closes (the end decides \"for the rest of the run\"), so it counts in "
       "the run's status, health and alerts.",
       "a clip or scheduler step that recurred at least {timeline.SETTLE} times with gaps "
       "of at most G steps is absent from the last max(2G, {timeline.WINDOW}) or more steps; "
       "a module in eval() from a change to the run's end",
       "clipping switched on after a warm-up; a scheduler that stops once its learning rates "
       "are flat or back at the base rate it was built for (a warm-up that ended): info"),
    _C("group-invariant", "Structure", "warning",
       "A run breaks what held on every step of every good run of its replicate group (same "
       "config and code hash, same layout, finished with no error finding): a tensor that "
       "always (or never) received a gradient, the step lifecycles, a state value (a "
       "hyperparameter, the dtypes, the autocast state, the modules in eval()). Derived "
       "when the run is read (`gradwatch findings`, the server's structure reply), as it "
       "needs the group's other runs: not among the run's stored findings.",
       "the difference lasts {group.PERSIST} steps in a row (or the whole run); at least "
       "{group.MIN_GOOD} good runs",
       "fewer than {group.MIN_GOOD} good runs; runs without a config or code hash, or made "
       "by this run's own process; an element that varied among the good runs"),
)  # fmt: skip

#: check id -> default severity (``amp-overflow`` escalates info -> warning -> error itself).
CHECKS: Final[dict[str, Severity]] = {c.id: c.severity for c in CATALOGUE}

#: Checks whose ``raise`` acts in the training thread before an optimizer update is applied
#: (or, for ``amp-overflow``, after a step the GradScaler skipped): only these accept the
#: ``checkpoint`` policy (save the last good state, then raise). The others run after the
#: update, on gradwatch's writer thread, or before training (``nondeterminism-risk``).
CHECKPOINT_CHECKS: Final[frozenset[str]] = frozenset(
    {
        "stale-grad",
        "grad-zeroed-before-step",
        "step-without-backward",
        "accumulation-wiped",
        "clip-before-backward",
        "param-no-grad",
        "param-not-in-optimizer",
        "frozen-param-in-optimizer",
        "param-mutated-outside-step",
        "nonfinite-loss",
        "nonfinite-grad",
        "amp-overflow",
        "exploding-grad",
        "loss-shape-mismatch",
        "eval-mode-training",
    }
)

#: Default policy of every check: findings are recorded and printed once, training goes on.
DEFAULT_POLICY: Final[Policy] = "warn"
