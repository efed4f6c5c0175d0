"""The lint catalogue: every rule of ``gradwatch lint``, its default severity and the
runtime checks that confirm it.

A rule that finds, before the run, the bug a runtime check finds during it carries the
runtime check's id (``stale-grad``, ``grad-zeroed-before-step``, ``param-not-in-optimizer``,
``eval-mode-training``: the constant of the check registry); the other rules have ids of
their own. Which runtime checks confirm a rule is declared by the checks (their
``confirms``, :mod:`gradwatch.core.registry`) and read here from the registry. Like the
runtime ids, these are a public interface: never rename one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from gradwatch.core import checkids
from gradwatch.core.catalogue import CHECKS
from gradwatch.core.checks import REGISTRY
from gradwatch.core.contract import Severity


@dataclass(frozen=True)
class Rule:
    """One lint rule.

    ``confirmed_by`` lists the runtime check ids whose finding, in a run of the linted
    script, confirms a finding of this rule (see :func:`confirms`): filled in from the
    registry, where each check names the rules it confirms.
    """

    id: str
    severity: Severity
    title: str
    hint: str
    confirmed_by: tuple[str, ...] = ()


_DECLARED: Final[tuple[Rule, ...]] = (
    Rule(
        checkids.STALE_GRAD,
        "error",
        "an optimizer steps in a loop that never clears its gradients",
        "call optimizer.zero_grad() once per optimizer step in the same loop (before "
        "backward, or right after step())",
    ),
    Rule(
        checkids.GRAD_ZEROED_BEFORE_STEP,
        "error",
        "gradients are cleared between backward() and step()",
        "move zero_grad() before backward() or after step()",
    ),
    Rule(
        checkids.CLIP_BEFORE_BACKWARD,
        "warning",
        "gradients are clipped before the backward() whose gradients the step applies",
        "clip after backward() and before step() (after scaler.unscale_(optimizer) with a "
        "GradScaler)",
    ),
    Rule(
        checkids.ACCUMULATION_WIPED,
        "error",
        "gradient accumulation is undone by a zero_grad() that runs every micro-batch",
        "clear gradients only right after the guarded step() (or under the first-micro-step "
        "guard, before backward)",
    ),
    Rule(
        "accumulation-loss-not-scaled",
        "warning",
        "gradient accumulation sums unscaled losses",
        "divide the loss by the number of accumulation steps before backward()",
    ),
    Rule(
        "backward-without-step",
        "warning",
        "a loop clears and computes gradients but no optimizer ever steps",
        "call optimizer.step() after backward() (or update the parameters by hand)",
    ),
    Rule(
        checkids.PARAM_NOT_IN_OPTIMIZER,
        "error",
        "the optimizer does not hold the parameters the loss trains",
        "build the optimizer from the model that runs forward, after replacing or unfreezing "
        "layers (or add a param group with optimizer.add_param_group)",
    ),
    Rule(
        checkids.EVAL_MODE_TRAINING,
        "error",
        "a model set to eval() is trained again without train()",
        "call model.train() at the start of every training epoch",
    ),
    Rule(
        "inference-in-train-mode",
        "warning",
        "validation or inference runs with the model in training mode",
        "call model.eval() before the validation loop (and model.train() after it)",
    ),
    Rule(
        "loss-detached",
        "error",
        "the tensor backward() is called on is cut from the model's graph",
        "build the loss from the model output itself; keep .item(), .detach(), .data and "
        "torch.tensor(...) for logging",
    ),
    Rule(
        "detached-in-loss-path",
        "error",
        "part of the loss is cut from a module the optimizer trains",
        "keep .detach() for targets and frozen or teacher networks, .item() / .numpy() / "
        "torch.tensor(...) for logging; feed the loss the tensor itself",
    ),
    Rule(
        "data-in-loss-path",
        "error",
        "a parameter's .data is read in forward() or written between forward and backward",
        "use the parameter itself in forward(); change parameters only after optimizer.step() "
        "(under torch.no_grad())",
    ),
    Rule(
        "module-requires-grad",
        "error",
        "requires_grad assigned on an nn.Module, where it has no effect",
        "call module.requires_grad_(False) (or set p.requires_grad on each parameter)",
    ),
    Rule(
        "requires-grad-non-leaf",
        "error",
        "requires_grad set on a tensor the model computed (not a leaf)",
        "use .detach() to cut a computed tensor from the graph; set requires_grad only on "
        "leaves (inputs, parameters)",
    ),
    Rule(
        "softmax-into-cross-entropy",
        "error",
        "softmax output fed to a loss that applies log-softmax itself",
        "pass the raw logits to CrossEntropyLoss / cross_entropy (use log_softmax with NLLLoss)",
    ),
    Rule(
        "sigmoid-into-bce-with-logits",
        "error",
        "sigmoid output fed to BCEWithLogitsLoss, which applies sigmoid itself",
        "pass the raw logits to BCEWithLogitsLoss / binary_cross_entropy_with_logits",
    ),
    Rule(
        "sampler-epoch-not-set",
        "warning",
        "DistributedSampler shuffles in the same order every epoch",
        "call sampler.set_epoch(epoch) at the start of every epoch",
    ),
    Rule(
        "unseeded-run",
        "info",  # a correct program need not be reproducible; a warning when selected
        "a training script that never seeds torch",
        "call torch.manual_seed(SEED) (or lightning.seed_everything / transformers.set_seed) "
        "before building the model",
    ),
)

RULES: Final[tuple[Rule, ...]] = tuple(
    replace(r, confirmed_by=REGISTRY.confirming(r.id)) for r in _DECLARED
)

BY_ID: Final[dict[str, Rule]] = {r.id: r for r in RULES}
IDS: Final[tuple[str, ...]] = tuple(BY_ID)

#: What a runtime finding must show, beyond its check id, to confirm a lint rule.
_CONFIRMING_RISK = {"unseeded-run": "seeds.torch_seed_user_set"}


def confirms(rule: str, runtime: Mapping[str, Any]) -> bool:
    """Whether the runtime finding ``runtime`` (wire form) confirms lint rule ``rule``.

    Example::

        >>> confirms("stale-grad", {"check": "stale-grad", "source": "runtime"})
        True
    """
    entry = BY_ID.get(rule)
    if entry is None or runtime.get("source", "runtime") != "runtime":
        return False
    if runtime.get("check") not in entry.confirmed_by:
        return False
    field = _CONFIRMING_RISK.get(rule)
    if field is None:
        return True
    risks = (runtime.get("details") or {}).get("risks") or []
    return any(isinstance(r, dict) and r.get("field") == field for r in risks)


def shared_ids() -> list[str]:
    """Lint rule ids that are also runtime check ids."""
    return [r.id for r in RULES if r.id in CHECKS]
