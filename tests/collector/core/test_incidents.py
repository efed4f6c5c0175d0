"""The incident model: which findings are causes, which are consequences, and the sentence."""

from __future__ import annotations

import random
from typing import Any

from gradwatch.core.incidents import (
    Grouper,
    annotate,
    evidence,
    group,
    incident_id,
    kind_of,
    views,
)
from gradwatch.nan.opcause import summary


def f(check: str, step: int | None, severity: str = "warning", **extra: Any) -> dict[str, Any]:
    return {
        "check": check,
        "severity": severity,
        "step": step,
        "param": extra.pop("param", None),
        "optimizer": extra.pop("optimizer", 0),
        "message": extra.pop("message", f"{check} happened."),
        "hint": "",
        "details": extra.pop("details", {}),
        "source": extra.pop("source", "runtime"),
    }


JUMP_151 = "learning rate of group 0 jumped from 0.01 to 10,000 at step 151."
ORIGIN = {
    "found": True,
    "phase": "backward",
    "step": 153,
    "summary": "First non-finite value at step 153: backward of module 'net.2' (Linear), "
    "AddmmBackward0: overflow.",
}


def nan_run() -> list[dict[str, Any]]:
    """The demo's NaN run, in the order the checks stored its findings."""
    return [
        f("exploding-grad", 152, param="net.0.weight"),
        f("exploding-grad", 152, param="net.2.weight"),
        f("nonfinite-loss", 153, "error", details={"origin": ORIGIN}),
        f("nonfinite-grad", 153, "error", details={"origin": ORIGIN}),
        f("nonfinite-param", 154, "error"),
        f("loss-diverging", 155),
        f(
            "lr-jump",
            151,
            "error",
            message="learning rate of group 0 jumped from 0.01 to 10,000 at step 151. Fix it.",
        ),
    ]


def test_an_lr_jump_is_the_cause_of_the_nan_cascade_that_follows() -> None:
    out = group(nan_run())
    assert out[-1] == ("lr-jump@151", "cause")
    assert all(role == "consequence" and inc == "lr-jump@151" for inc, role in out[:-1])
    (view,) = views(nan_run())
    assert view.severity == "error"
    assert view.sentence() == (
        "lr-jump: learning rate of group 0 jumped from 0.01 to 10,000 at step 151; then "
        "exploding-grad at step 152 (2 findings), nonfinite-loss at step 153, nonfinite-grad "
        "at step 153, nonfinite-param at step 154, loss-diverging at step 155."
    )


def test_without_an_lr_finding_the_nan_provenance_op_is_the_cause() -> None:
    findings = [x for x in nan_run() if x["check"] not in ("lr-jump", "exploding-grad")]
    out = group(findings)
    assert out[0] == ("nonfinite-loss@153", "cause")
    assert kind_of(findings[0]) == "nan-origin"
    assert {r for _, r in out[1:]} == {"consequence"}
    (view,) = views(findings)
    assert view.sentence().startswith(
        "First non-finite value at step 153: backward of module 'net.2' (Linear), "
        "AddmmBackward0: overflow; then nonfinite-grad at step 153"
    )


def test_a_nonfinite_input_batch_is_its_own_kind_of_cause() -> None:
    batch = {**ORIGIN, "phase": "input", "summary": "First non-finite value at step 9: input."}
    findings = [f("nonfinite-loss", 9, "error", details={"origin": batch}), f("nonfinite-grad", 9)]
    assert kind_of(findings[0]) == "input-batch"
    assert group(findings) == [("nonfinite-loss@9", "cause"), ("nonfinite-loss@9", "consequence")]


def test_an_outlier_batch_explains_the_spike_it_causes() -> None:
    findings = [
        f("loss-diverging", 41),
        f("exploding-grad", 40, details={"batch_outlier": {"max_abs": 1e6}}),
    ]
    assert group(findings) == [
        ("exploding-grad@40", "consequence"),
        ("exploding-grad@40", "cause"),
    ]
    assert kind_of(findings[1]) == "input-batch"


def test_stale_grad_is_the_cause_of_every_later_loss_warning() -> None:
    findings = [f("stale-grad", 2, "error")] + [f("loss-diverging", s) for s in range(20, 130, 10)]
    out = group(findings)
    assert out[0] == ("stale-grad@2", "cause")
    assert {x for x in out[1:]} == {("stale-grad@2", "consequence")}
    (view,) = views(findings)
    assert "then loss-diverging at steps 20–120 (11 findings)." in view.sentence()


def test_lifecycle_and_mutation_causes() -> None:
    for cause in ("grad-zeroed-before-step", "accumulation-wiped", "param-mutated-outside-step"):
        out = group([f(cause, 5, "error"), f("update-ratio", 7)])
        assert out == [(f"{cause}@5", "cause"), (f"{cause}@5", "consequence")], cause


def test_unrelated_findings_are_separate_incidents() -> None:
    findings = [
        f("frozen-param-in-optimizer", 1),
        f("exploding-grad", 10, param="a"),
        f("loss-plateau", 400, "info"),  # long after the spike's window
        f("nonfinite-loss", 100, "error"),  # outside the exploding-grad window of 20 steps
        f("step-without-backward", 12),  # not a consequence of a numeric problem
        f("stale-grad", None, source="lint"),
    ]
    out = group(findings)
    assert [role for _, role in out] == ["cause"] * len(findings)
    assert len({inc for inc, _ in out}) == len(findings)


def test_a_finding_before_its_cause_is_not_its_consequence() -> None:
    out = group([f("loss-diverging", 3), f("stale-grad", 8, "error")])
    assert [r for _, r in out] == ["cause", "cause"]


def test_ids_are_stable_when_the_same_findings_are_regrouped_in_any_order() -> None:
    findings = [*nan_run(), f("stale-grad", 400, "error"), f("loss-plateau", 500, "info")]
    expected = {
        incident_id(x) + x["check"]: g for x, g in zip(findings, group(findings), strict=True)
    }
    rng = random.Random(0)
    for _ in range(20):
        shuffled = findings[:]
        rng.shuffle(shuffled)
        again = {
            incident_id(x) + x["check"]: g for x, g in zip(shuffled, group(shuffled), strict=True)
        }
        assert again == expected
    # regrouping already annotated findings changes nothing
    assert [(x["incident"], x["role"]) for x in annotate(annotate(findings))] == group(findings)


def test_one_check_at_one_step_is_one_incident_whatever_tensors_and_optimizers_show_it() -> None:
    # four optimizers of four nets that all lack zero_grad(): one line of code to read
    stale = [f("stale-grad", 2, "error", optimizer=o) for o in range(4)]
    out = group([*stale, f("loss-diverging", 62)])
    assert out[0] == ("stale-grad@2", "cause")
    assert set(out[1:]) == {("stale-grad@2", "consequence")}
    assert incident_id(f("exploding-grad", 10, param="a")) == "exploding-grad@10"
    assert incident_id(f("stale-grad", None)) == "stale-grad@-"
    # not merged: another check at the same step, the same check at another step
    apart = group([f("param-not-updated", 3, param="a"), f("frozen-param-in-optimizer", 3),
                   f("param-not-updated", 9, param="b")])  # fmt: skip
    assert [r for _, r in apart] == ["cause"] * 3


def test_a_rate_too_large_at_the_step_it_jumped_is_the_jump() -> None:
    findings = [
        f("lr-too-large", 50),
        f("lr-jump", 50, message=JUMP_151),
        f("param-no-grad", 63, param="fc.weight"),  # units a huge step left dead
        f("loss-diverging", 184),  # past the jump's window: the rate's own window
    ]
    out = group(findings)
    assert out[1] == ("lr-jump@50", "cause")
    assert [x for x, _ in out] == ["lr-jump@50"] * 4
    # without the size finding, a late symptom is not the jump's
    assert group([findings[1], findings[3]])[1] == ("loss-diverging@184", "cause")


def test_a_repeated_batch_and_a_broadcast_loss_explain_the_stall_that_follows() -> None:
    for cause in ("repeated-batch", "loss-shape-mismatch", "eval-mode-training"):
        out = group([f(cause, 6), f("vanishing-grad", 152, param="fc0.weight"),
                     f("loss-plateau", 348, "info")])  # fmt: skip
        assert [r for _, r in out] == ["cause", "consequence", "consequence"], cause
    out = group([f("loss-shape-mismatch", 1, "error"), f("loss-at-chance", 300)])
    assert out[1] == ("loss-shape-mismatch@1", "consequence")
    # a broadcast loss does not explain a NaN
    assert group([f("loss-shape-mismatch", 1), f("nonfinite-loss", 40)])[1][1] == "cause"


def test_live_grouping_matches_the_readers_when_causes_arrive_first() -> None:
    findings = sorted(nan_run(), key=lambda x: x["step"])
    live = Grouper()
    assert [live.add(x) for x in findings] == group(findings)


def test_the_same_onset_stored_twice_is_one_incident() -> None:
    out = group([f("stale-grad", 4, "warning"), f("stale-grad", 4, "error")])
    assert out == [("stale-grad@4", "cause"), ("stale-grad@4", "consequence")]


def test_consequences_leave_the_origin_sentence_to_their_cause() -> None:
    message = f"loss is NaN. {ORIGIN['summary']}"
    findings = [
        f("nonfinite-loss", 153, "error", message=message, details={"origin": ORIGIN}),
        f("nonfinite-grad", 153, "error", message=message, details={"origin": ORIGIN}),
    ]
    cause, consequence = annotate(findings)
    assert evidence(cause) == message
    assert evidence(consequence) == "loss is NaN."


def test_a_loss_side_origin_names_its_operation_once() -> None:
    origin = {"found": True, "phase": "loss", "step": 5, "autograd_node": "MseLossBackward0"}
    alone = summary({**origin, "loss_ops": ["MseLossBackward0"]})
    assert alone.endswith("likely MseLossBackward0.") and "of:" not in alone
    longer = summary({**origin, "loss_ops": ["MseLossBackward0", "DivBackward0"]})
    assert longer.endswith("likely MseLossBackward0 (on the loss path DivBackward0).")


def test_an_lr_jump_also_explains_the_spike_counted_one_step_earlier() -> None:
    findings = [
        f("exploding-grad", 150, param="0.weight"),
        f("lr-jump", 151, "error", message=JUMP_151),
        f("loss-diverging", 149),  # two steps before: not its consequence
    ]
    assert group(findings) == [
        ("lr-jump@151", "consequence"),
        ("lr-jump@151", "cause"),
        ("loss-diverging@149", "cause"),
    ]


def test_a_structure_change_shortly_before_a_symptom_is_named_as_its_candidate_cause() -> None:
    dropped = f(
        "structure-safeguard",
        1200,
        message="From step 1,200, clip_grad_norm_ is no longer called before step(): it was "
        "called on every step from step 1 to step 1,199.",
    )
    changed = f("structure-change", 300, "info", message="From step 300, param group 0's "
                "weight_decay is 0.0 instead of 0.05.")  # fmt: skip
    grads = f("exploding-grad", 1350)
    late = f("loss-plateau", 300 + 101)
    (view, *_) = views([dropped, grads])
    assert view.cause["check"] == "structure-safeguard"
    assert view.sentence().startswith(
        "structure-safeguard at step 1200: From step 1,200, clip_grad_norm_ is no longer called"
    )
    assert view.sentence().endswith("; then exploding-grad at step 1350.")
    # an info change explains what follows within its window, not later
    roles = group([changed, f("loss-plateau", 350), late])
    assert [r for _, r in roles] == ["cause", "consequence", "cause"]
