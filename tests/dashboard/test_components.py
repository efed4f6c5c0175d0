"""The findings list of the run page: runtime findings, lint findings beside them (with
their confirmation), and the origin of a first NaN."""

from __future__ import annotations

from typing import Any

from gradwatch_dashboard.components import findings_list


def texts(component: Any) -> list[str]:
    """Every string in a Dash component tree, in order."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item)
        elif hasattr(node, "children"):
            walk(node.children)

    walk(component)
    return out


def hrefs(component: Any) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list | tuple):
            for item in node:
                walk(item)
        elif hasattr(node, "children"):
            if getattr(node, "href", None):
                found.append(node.href)
            walk(node.children)

    walk(component)
    return found


LINT = {
    "check": "stale-grad",
    "severity": "error",
    "step": None,
    "param": None,
    "message": "optimizer.zero_grad() is never called in this training loop.",
    "hint": "call optimizer.zero_grad() once per step",
    "details": {"path": "/home/u/proj/train.py", "line": 42, "col": 8},
    "source": "lint",
}
ORIGIN = {
    "found": True,
    "step": 7,
    "phase": "backward",
    "module": "head",
    "module_type": "Linear",
    "op": "torch.log",
    "autograd_node": "LogBackward0",
    "cause": "log of 0",
}


def test_lint_findings_show_their_line_and_whether_runtime_confirmed_them() -> None:
    confirmed = LINT | {"confirmed": True, "confirmed_by": {"check": "stale-grad", "step": 2}}
    unconfirmed = LINT | {"check": "unseeded-run", "confirmed": False, "confirmed_by": None}
    runtime = {
        "check": "stale-grad",
        "severity": "error",
        "step": 2,
        "param": "0.weight",
        "message": "gradients accumulate across steps.",
        "source": "runtime",
        "confirmed": None,
    }
    view = findings_list("r1", [confirmed, unconfirmed, runtime])
    words = " ".join(texts(view))
    assert "train.py:42" in words and "/home/u/proj" not in words
    assert words.count("lint") == 2
    assert "confirmed at runtime by" in words and "not seen at runtime (yet)" in words
    assert hrefs(view).count("/runs/r1?step=2") == 2  # the confirmation and the runtime step


def test_a_nonfinite_finding_names_the_module_and_operation_of_its_origin() -> None:
    nan = {
        "check": "nonfinite-grad",
        "severity": "error",
        "step": 7,
        "param": "head.weight",
        "message": "3 gradient elements are NaN/Inf.",
        "details": {"origin": ORIGIN},
    }
    words = " ".join(texts(findings_list("r1", [nan])))
    assert "origin: backward of module 'head', torch.log → LogBackward0 (log of 0)" in words
    lost = nan | {"details": {"origin": {"found": False, "reason": "checked after the update"}}}
    assert "origin:" not in " ".join(texts(findings_list("r1", [lost])))


def test_no_findings_is_an_empty_state() -> None:
    assert "every check stayed quiet" in " ".join(texts(findings_list("r1", [])))
