"""The check registry: each family declares its checks once, and the catalogue, the incident
model, lint confirmation and docs/checks.md all read them from it.

The throwaway family below is what a new check costs: one entry (its id, stage, incident
rule, thresholds and text), and every reader sees it.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from gradwatch.checks.catalogue_doc import render
from gradwatch.core.catalogue import CATALOGUE, CHECKPOINT_CHECKS, CHECKS
from gradwatch.core.checks import REGISTRY
from gradwatch.core.incidents import RULES, RuleBook, group, views
from gradwatch.core.lint_catalogue import BY_ID
from gradwatch.core.registry import Cause, Check, Family, Registry

THROWAWAY: Final = "throwaway-check"
#: a constant the throwaway check's thresholds name, as a real family's name theirs
THROWAWAY_STEPS: Final = 7

FAMILY = Family(
    __name__,
    "Throwaway",
    (
        Check(
            THROWAWAY,
            "warning",
            "after-update",
            "A check that exists only in this test.",
            "{throwaway.THROWAWAY_STEPS} steps in a row",
            "everything else",
            cause=Cause("throwaway cause", 5, frozenset({"stalled"}), window=30),
            signs=frozenset({"symptom"}),
            confirms=("stale-grad",),
        ),
    ),
    constants={"throwaway": __name__},
)


def f(check: str, step: int) -> dict[str, Any]:
    return {"check": check, "step": step, "severity": "warning", "message": f"{check}."}


def test_a_new_entry_reaches_the_catalogue_incidents_lint_and_the_page() -> None:
    registry = REGISTRY.with_family(FAMILY)
    # the catalogue: id, severity, stage, section
    assert registry.severities[THROWAWAY] == "warning"
    assert list(registry.severities)[-1] == THROWAWAY  # after the other families
    assert THROWAWAY in registry.at("after-update")
    assert registry.by_id[THROWAWAY].section == "Throwaway"
    assert registry.family_of[THROWAWAY] == __name__
    # the incident model: its rule, by precedence first; what it explains, by sign
    assert registry.rules[0].kind == THROWAWAY
    assert registry.rules[0].consequences == REGISTRY.showing("stalled")
    assert THROWAWAY in next(r for r in registry.rules if r.kind == "stale-grad").consequences
    book = RuleBook(registry)
    grouped = group([f(THROWAWAY, 3), f("loss-plateau", 20), f("loss-plateau", 40)], book)
    assert grouped == [
        (f"{THROWAWAY}@3", "cause"),
        (f"{THROWAWAY}@3", "consequence"),
        ("loss-plateau@40", "cause"),  # past its window of 30 steps
    ]
    assert [v.id for v in views([f(THROWAWAY, 3), f("loss-plateau", 9)], book)] == [
        f"{THROWAWAY}@3"
    ]
    # lint confirmation
    assert registry.confirming("stale-grad") == ("stale-grad", THROWAWAY)
    # the page: its section, text, filled-in threshold, policies and incident row
    page = render(registry)
    assert "## Throwaway\n\n### `throwaway-check`\n\nA check that exists only in this test." in page
    assert "- thresholds: 7 steps in a row\n" in page
    assert "- policies: `off`, `record`, `warn`, `raise`, `skip` (default `warn`)" in page
    assert "| `throwaway-check` (throwaway cause) | " in page
    # and the code's own registry is untouched
    assert THROWAWAY not in CHECKS and THROWAWAY not in render()
    assert group([f(THROWAWAY, 3), f("loss-plateau", 20)])[1] == ("loss-plateau@20", "cause")


def test_the_registry_refuses_a_second_id_a_shared_precedence_and_an_unknown_consequence() -> None:
    check = FAMILY.checks[0]
    with pytest.raises(ValueError, match="declared twice"):
        Registry([FAMILY, Family("other", "Other", (check,))])
    with pytest.raises(ValueError, match="share a precedence"):
        REGISTRY.with_family(Family("other", "Other", (), derived={"x": Cause("x", 10)}))
    with pytest.raises(ValueError, match="undeclared checks"):
        REGISTRY.with_family(
            Family("other", "Other", (), derived={"x": Cause("x", 1, also=frozenset({"no-such"}))})
        )
    with pytest.raises(ValueError, match="names both"):
        _ = REGISTRY.with_family(
            Family("other", "Other", (), constants={"lr": "somewhere.else"})
        ).constants


def test_the_catalogue_is_the_registrys_view() -> None:
    assert REGISTRY.checks == CATALOGUE
    assert list(CHECKS) == [c.id for c in REGISTRY.checks]
    assert REGISTRY.rules == RULES
    # the checks that act before the update: the ones that take the checkpoint policy
    assert {
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
    } == CHECKPOINT_CHECKS


def test_lint_rules_are_confirmed_by_the_checks_that_say_so() -> None:
    confirmed = {r.id: r.confirmed_by for r in BY_ID.values() if r.confirmed_by}
    assert confirmed == {
        "stale-grad": ("stale-grad",),
        "grad-zeroed-before-step": ("grad-zeroed-before-step",),
        "accumulation-wiped": ("accumulation-wiped",),
        "clip-before-backward": ("clip-before-backward",),
        "param-not-in-optimizer": ("param-not-in-optimizer",),
        "eval-mode-training": ("eval-mode-training",),
        "loss-detached": ("param-no-grad",),
        "detached-in-loss-path": ("param-no-grad",),
        "unseeded-run": ("nondeterminism-risk",),
    }
    every_lint_rule = set(BY_ID)
    assert all(set(c.confirms) <= every_lint_rule for c in REGISTRY.checks)


def test_incident_rules_keep_their_order_and_the_derived_kinds() -> None:
    assert [r.kind for r in RULES] == [
        "lr-jump",
        "lr-collapse",
        "lr-too-large",
        "input-batch",
        "nan-origin",
        "stale-grad",
        "grad-zeroed-before-step",
        "accumulation-wiped",
        "clip-before-backward",
        "repeated-batch",
        "loss-shape-mismatch",
        "param-mutated-outside-step",
        "ddp-param-desync",
        "structure-safeguard",
        "group-invariant",
        "structure-change",
        "nonfinite",
        "exploding-grad",
        "eval-mode-training",
    ]
