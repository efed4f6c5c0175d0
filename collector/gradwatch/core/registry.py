"""The check registry: what every check is, declared once by its family.

Each family of checks declares its checks in its own module of :mod:`gradwatch.core.checks`
(torch-free, so the server and the dashboard read them): the id (a constant of that module),
the documentation section, the default severity, the *stage* at which the check acts, the
text of ``docs/checks.md`` (definition, thresholds, what it stays quiet on), the incident
rule of a check that can be a root cause (:class:`Cause`), the kinds of evidence its
findings are as a consequence (:data:`Sign`), and the lint rules a finding of it confirms.
Everything else reads the :class:`Registry` built from them: the catalogue
(:mod:`gradwatch.core.catalogue`), the incident model (:mod:`gradwatch.core.incidents`), lint
confirmation (:mod:`gradwatch.core.lint_catalogue`) and the page's generator
(:mod:`gradwatch.checks.catalogue_doc`). Standard library only.

Example::

    >>> from gradwatch.core.checks import REGISTRY
    >>> REGISTRY.by_id["stale-grad"].stage
    'before-update'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from gradwatch.core.contract import Severity

#: a window with no end: a cause that explains what follows it for the rest of the run
UNBOUNDED: Final = 1 << 62

#: When a check acts: ``before-update`` — in the training thread before the optimizer applies
#: the update (its ``raise`` stops the bad update, so it accepts the ``checkpoint`` policy);
#: ``after-update`` — on the rows of collected steps, on gradwatch's writer thread (or a
#: rank's comparer thread); ``start`` — once, before training; ``close`` — when the run
#: closes; ``read`` — derived when a run is read (it needs other runs).
Stage = Literal["before-update", "after-update", "start", "close", "read"]
STAGES: Final[tuple[Stage, ...]] = ("before-update", "after-update", "start", "close", "read")

#: What a finding is evidence of as a consequence; a cause's rule explains classes of them.
#: ``nonfinite``: a non-finite value; ``symptom``: numeric trouble (non-finite values,
#: jumps, overflow, divergence, rank spread); ``stalled``: training that stopped moving;
#: ``faded``: a stall without numeric trouble (gradients fade, weights stand still);
#: ``lr-harm``: what a learning rate far too large does besides diverging (dead ReLUs:
#: exactly zero gradients); ``no-info``: a loss that no longer carries the inputs'
#: information (at the targets' marginal, gradients that say nothing of the inputs).
Sign = Literal["nonfinite", "symptom", "stalled", "faded", "lr-harm", "no-info"]

#: What a check that runs on every collected row reads of it: ``values`` — the step's
#: device values from before the update (loss, gradient norms, non-finite counts), which
#: on an accelerator reach the host one transfer window late unless its policy acts;
#: ``update`` — the row once the update is applied (parameter and update norms, the loss
#: curve, learning rates). The engine takes every row of a window one at a time while such
#: a check has a policy that acts (raise, skip, checkpoint).
Row = Literal["values", "update"]


@dataclass(frozen=True)
class Cause:
    """The incident rule of a check (or derived kind) that can be a root cause: its findings
    explain later findings whose check shows one of ``explains`` (or is named in ``also``)
    and whose step lies in ``[cause step - lead, cause step + window]``. ``precedence``
    orders the rules (lower first: when two open causes could claim a finding, the earlier
    rule wins); ``label`` names the cause in the docs' table."""

    label: str
    precedence: int
    explains: frozenset[Sign] = frozenset()
    also: frozenset[str] = frozenset()
    window: int = UNBOUNDED
    lead: int = 0


@dataclass(frozen=True)
class Rule:
    """A resolved incident rule: findings of ``kind`` (see
    :func:`gradwatch.core.incidents.kind_of`) explain findings of ``consequences`` whose step
    lies in ``[cause step - lead, cause step + window]`` (``lead``: a learning rate is read
    when its step runs, while the gradients it spoiled can be seen one step earlier in the
    other checks' counting)."""

    kind: str
    consequences: frozenset[str]
    window: int
    label: str
    lead: int = 0


@dataclass(frozen=True)
class Check:
    """One check as documented in ``docs/checks.md``.

    ``thresholds`` and ``quiet_on`` may name the code's own constants as ``{module.NAME}``
    (see :mod:`gradwatch.checks.catalogue_doc`), filled in by the generator, so the page shows
    the values the code uses. ``cause``: its incident rule when its findings can be a root
    cause; ``signs``: what its findings are evidence of under another cause; ``confirms``:
    the ``gradwatch lint`` rules a runtime finding of it confirms; ``row``: what it reads of
    each collected row, when it runs on every row (:data:`Row`)."""

    id: str
    severity: Severity
    stage: Stage
    definition: str
    thresholds: str
    quiet_on: str
    cause: Cause | None = None
    signs: frozenset[Sign] = frozenset()
    confirms: tuple[str, ...] = ()
    row: Row | None = None
    #: filled in by :class:`Family`: the documentation section (the family's)
    section: str = ""


@dataclass(frozen=True)
class Family:
    """The checks one module declares, in the order of the documentation.

    ``module`` is the declaring module's ``__name__`` (the architecture test holds each
    family to its module); ``derived`` are incident rules of cause kinds that are not
    checks themselves (see :func:`gradwatch.core.incidents.kind_of`); ``constants`` names the
    modules whose constants its texts show as ``{name.CONSTANT}`` (name -> import path,
    imported only by the page's generator)."""

    module: str
    section: str
    checks: tuple[Check, ...]
    derived: Mapping[str, Cause] = field(default_factory=dict)
    constants: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fixed = tuple(replace(c, section=self.section) for c in self.checks)
        object.__setattr__(self, "checks", fixed)


class Registry:
    """Every family's checks, in the order of the families; immutable (:meth:`with_family`
    returns a new registry, e.g. for a test's throwaway check)."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families: tuple[Family, ...] = tuple(families)
        self.checks: tuple[Check, ...] = tuple(c for f in self.families for c in f.checks)
        self.by_id: dict[str, Check] = {c.id: c for c in self.checks}
        self.family_of: dict[str, str] = {c.id: f.module for f in self.families for c in f.checks}
        if len(self.by_id) != len(self.checks):
            twice = sorted({c.id for c in self.checks if _count(self.checks, c.id) > 1})
            raise ValueError(f"a check id is declared twice: {twice}")
        self.rules: tuple[Rule, ...] = self._rules()

    def with_family(self, family: Family) -> Registry:
        """This registry with ``family`` added after the others."""
        return Registry((*self.families, family))

    @property
    def severities(self) -> dict[str, Severity]:
        """Check id -> default severity, in the order of the documentation."""
        return {c.id: c.severity for c in self.checks}

    @property
    def constants(self) -> dict[str, str]:
        """Every family's ``{name.CONSTANT}`` modules: name -> import path."""
        out: dict[str, str] = {}
        for family in self.families:
            for name, path in family.constants.items():
                if out.setdefault(name, path) != path:
                    raise ValueError(f"{name!r} names both {out[name]} and {path}")
        return out

    def reading(self, *parts: Row) -> tuple[str, ...]:
        """The ids of the checks that read ``parts`` of each collected row, in the order of
        the documentation."""
        return tuple(c.id for c in self.checks if c.row is not None and c.row in parts)

    def at(self, stage: Stage) -> frozenset[str]:
        """The ids of the checks that act at ``stage``."""
        return frozenset(c.id for c in self.checks if c.stage == stage)

    def showing(self, sign: Sign) -> frozenset[str]:
        """The ids of the checks whose findings are evidence of ``sign``."""
        return frozenset(c.id for c in self.checks if sign in c.signs)

    def confirming(self, lint_rule: str) -> tuple[str, ...]:
        """The runtime checks whose finding confirms ``lint_rule``, in catalogue order."""
        return tuple(c.id for c in self.checks if lint_rule in c.confirms)

    def _rules(self) -> tuple[Rule, ...]:
        causes: dict[str, Cause] = {}
        for family in self.families:
            causes.update(family.derived)
            causes.update({c.id: c.cause for c in family.checks if c.cause is not None})
        ranks = [c.precedence for c in causes.values()]
        if len(set(ranks)) != len(ranks):
            shared = sorted(k for k, c in causes.items() if ranks.count(c.precedence) > 1)
            raise ValueError(f"two incident rules share a precedence: {shared}")
        ordered = sorted(causes.items(), key=lambda item: item[1].precedence)
        return tuple(self._rule(kind, cause) for kind, cause in ordered)

    def _rule(self, kind: str, cause: Cause) -> Rule:
        unknown = sorted(cause.also - self.by_id.keys())
        if unknown:
            raise ValueError(f"the incident rule of {kind!r} names undeclared checks: {unknown}")
        shown = {c.id for c in self.checks if c.signs & cause.explains}
        return Rule(kind, frozenset(shown | cause.also), cause.window, cause.label, cause.lead)


def _count(checks: tuple[Check, ...], check_id: str) -> int:
    return sum(c.id == check_id for c in checks)
