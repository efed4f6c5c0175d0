"""Reusable layout fragments: badges, tables, empty states, the findings list, fingerprints."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dash import dcc, html

from gradwatch.core import checkids
from gradwatch.core.contract import status_words
from gradwatch.core.incidents import View, evidence, views
from gradwatch_dashboard.values import fmt

SEVERITY_ORDER = ("error", "warning", "info")


def badge(text: str, cls: str) -> html.Span:
    """A colored pill (``cls``: ok, info, warning, error, or a run status)."""
    return html.Span(text, className=f"gw-badge gw-{cls}")


def health(counts: dict[str, int]) -> html.Span:
    """A run's findings as one badge per severity present (worst first), or ``ok``."""
    present = [(s, int(counts.get(s, 0))) for s in SEVERITY_ORDER if counts.get(s)]
    if not present:
        return badge("ok", "ok")
    badges = [badge(f"{n} {s}{'s' if n > 1 and s != 'info' else ''}", s) for s, n in present]
    return html.Span(badges, className="gw-health")


def status_badge(status: str, counts: dict[str, int]) -> html.Span:
    """The run's status; a run that finished with an error finding (a NaN, a stale
    gradient) is not shown as a green success."""
    words = status_words(status, counts)
    return badge(words, worst(counts) if words != status else status)


def worst(counts: dict[str, int]) -> str:
    """``error``, ``warning``, ``info`` or ``ok``."""
    return next((s for s in SEVERITY_ORDER if counts.get(s)), "ok")


def named(text: str, names: dict[str, str]) -> str:
    """``text`` with every run id in ``names`` replaced by that run's name (a drift message
    names "its replicate 20261206T044718-ee97aa56": the reader knows it as replicate-a)."""
    for run_id, name in names.items():
        if run_id and run_id in text and name:
            text = text.replace(run_id, name)
    return text


def renamed(findings: Sequence[dict[str, Any]], names: dict[str, str]) -> list[dict[str, Any]]:
    """Copies of ``findings`` whose messages name runs by their names (``named``)."""
    if not names:
        return list(findings)
    return [f | {"message": named(str(f.get("message", "")), names)} for f in findings]


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], **kw: Any) -> html.Table:
    """A plain table; cells may be text or components."""
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h) for h in header])),
            html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
        ],
        className="gw-table",
        **kw,
    )


def empty_state(text: str, **kw: Any) -> html.Div:
    """One sentence where there is nothing to show."""
    return html.Div(text, className="gw-empty", **kw)


def card(*children: Any, **kw: Any) -> html.Div:
    """A white box."""
    return html.Div(list(children), className="gw-card", **kw)


def graph(graph_id: str, figure: Any = None) -> dcc.Graph:
    """A graph with the mode bar kept out of the way (``figure``: drawn from the start)."""
    if figure is None:
        return dcc.Graph(id=graph_id, config={"displaylogo": False, "responsive": True})
    return dcc.Graph(id=graph_id, figure=figure, config={"displaylogo": False, "responsive": True})


def findings_list(run_id: str, findings: Sequence[dict[str, Any]]) -> html.Div | html.Table:
    """Findings by incident (:mod:`gradwatch.core.incidents`): a row with the sentence naming
    the root cause, then its findings, the cause first; each step links to the run page
    focused on it. Lint findings (``gradwatch lint`` of the script, before the run) come
    last, with their file line and whether a runtime finding confirmed them; a
    ``nonfinite-*`` finding shows where its first NaN/Inf was made (``details.origin``)."""
    if not findings:
        return empty_state("No findings: every check stayed quiet.")
    rows: list[list[Any]] = []
    for view in views(findings):
        if view.cause.get("source") != "lint":
            rows.append(_incident_row(view))
        rows += [_finding_row(run_id, f) for f in view.findings]
    return table(["severity", "check", "step", "tensor", "what happened"], rows)


def _incident_row(view: View) -> list[Any]:
    return [
        badge(view.severity, view.severity),
        html.Span("incident", className="gw-muted"),
        "",
        "",
        html.Strong(view.sentence(), className="gw-incident"),
    ]


def _finding_row(run_id: str, f: dict[str, Any]) -> list[Any]:
    consequence = f.get("role") == "consequence"
    return [
        badge(f["severity"], f["severity"]),
        html.Span(["↳ " if consequence else "", html.Code(f["check"])], className="gw-nowrap"),
        _where(run_id, f),
        _tensor(f),
        html.Div([html.Div(evidence(f)), *_extra(run_id, f)]),
    ]


def _tensor(f: dict[str, Any]) -> Any:
    if f.get("param"):
        return html.Code(f["param"])
    return html.Span("whole run", className="gw-muted")  # a run-level finding (loss, lifecycle)


def _where(run_id: str, f: dict[str, Any]) -> Any:
    step = f.get("step")
    if step is not None:
        return dcc.Link(
            f"step {step}", href=f"/runs/{run_id}?step={step}", className="gw-step gw-nowrap"
        )
    details = f.get("details") or {}
    if f.get("source") == "lint" and details.get("line") is not None:
        name = str(details.get("path") or "").replace("\\", "/").rsplit("/", 1)[-1]
        return html.Span(
            [badge("lint", "info"), f" {name}:{details['line']}"], className="gw-lint-where"
        )
    return "—"


def _extra(run_id: str, f: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    origin = (f.get("details") or {}).get("origin")
    if isinstance(origin, dict) and origin.get("found"):
        what = " → ".join(str(x) for x in (origin.get("op"), origin.get("autograd_node")) if x)
        module = origin.get("module")
        where = "the loss computation" if origin.get("phase") == "loss" else f"module {module!r}"
        out.append(
            html.Div(
                f"origin: {origin.get('phase', '')} of {where}, {what or 'an operation'}"
                + (f" ({origin['cause']})" if origin.get("cause") else ""),
                className="gw-origin",
            )
        )
    if f.get("source") == "lint":
        by = f.get("confirmed_by") or {}
        if f.get("confirmed") and by.get("step") is not None:
            out.append(
                html.Div(
                    [
                        "confirmed at runtime by ",
                        html.Code(str(by.get("check", ""))),
                        " at ",
                        dcc.Link(
                            f"step {by['step']}",
                            href=f"/runs/{run_id}?step={by['step']}",
                            className="gw-step",
                        ),
                    ],
                    className="gw-confirmed",
                )
            )
        else:
            out.append(html.Div("not seen at runtime (yet)", className="gw-muted"))
    reference = (f.get("details") or {}).get("reference")
    if f.get("check") == checkids.REPRO_DRIFT and reference:
        href = f"/compare?runs={reference},{run_id}"
        out.append(dcc.Link("compare with its replicate", href=href, className="gw-compare-link"))
    if f.get("hint") and f.get("role") != "consequence":  # a consequence's fix is its cause's
        out.append(html.Div(f["hint"], className="gw-muted"))
    return out


def flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts as ``(dotted.key, value)`` pairs, sorted; lists are kept as values."""
    if not isinstance(obj, dict):
        return [(prefix, obj)]
    out: list[tuple[str, Any]] = []
    for key in sorted(obj):
        name = f"{prefix}.{key}" if prefix else str(key)
        value = obj[key]
        out += flatten(value, name) if isinstance(value, dict) and value else [(name, value)]
    return out


KEY_FIELDS = (
    "versions.torch",
    "versions.python",
    "versions.cuda",
    "seeds.torch_initial_seed",
    "determinism.deterministic_algorithms",
    "device.type",
    "git.commit",
    "config_hash",
    "code_hash",
    "init_params_hash",
)


def short(value: Any, width: int = 80) -> str:
    """A value on one line, cut to ``width`` characters."""
    text = fmt(value) if isinstance(value, float) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def fingerprint_panel(fp: dict[str, Any]) -> html.Div:
    """The run's config as the user wrote it (``watch(config=...)``), one row per setting;
    then, behind one "details" disclosure, the fingerprint's key fields (versions, seeds,
    hashes) and every other field it recorded."""
    if not fp:
        return empty_state("No fingerprint recorded yet.")
    config = fp.get("config")
    settings = flatten(config) if isinstance(config, dict) and config else []
    rest = flatten({k: v for k, v in fp.items() if k != "config"})
    lookup = dict(rest)
    keys = [(k, lookup[k]) for k in KEY_FIELDS if k in lookup]
    others = [(k, v) for k, v in rest if k not in KEY_FIELDS]
    user = (
        table(
            ["setting", "value"], [[html.Code(k), short(v)] for k, v in settings], id="run-config"
        )
        if settings
        else empty_state("No config recorded: pass watch(..., config=...) to see it here.")
    )
    return html.Div(
        [
            user,
            html.Details(
                [
                    html.Summary(f"details: environment, seeds and hashes ({len(rest)} fields)"),
                    table(["field", "value"], [[html.Code(k), short(v)] for k, v in keys]),
                    table(["field", "value"], [[html.Code(k), short(v, 160)] for k, v in others]),
                ],
                id="run-fingerprint-details",
            ),
        ]
    )
