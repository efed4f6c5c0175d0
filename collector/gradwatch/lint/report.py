"""Output formats of ``gradwatch lint``: text, JSON and SARIF 2.1.0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gradwatch._version import __version__
from gradwatch.core.lint_catalogue import RULES
from gradwatch.lint.engine import LintResult
from gradwatch.lint.result import LintFinding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def text(result: LintResult, findings: list[LintFinding]) -> str:
    """One line per finding (plus its fix), then a summary line."""
    lines = []
    for f in findings:
        lines.append(f.line_text() + (" [suppressed]" if f.suppressed else ""))
        lines.append(f"    Fix: {f.hint}")
    lines.append(f"{counts(findings)} in {result.files} file{'s' if result.files != 1 else ''}")
    return "\n".join(lines)


def counts(findings: list[LintFinding]) -> str:
    """``1 error, 2 warnings`` (and ``, 1 info`` when there is any)."""
    errors = sum(f.severity == "error" for f in findings)
    warnings = sum(f.severity == "warning" for f in findings)
    info = sum(f.severity == "info" for f in findings)
    out = f"{errors} error{'s' if errors != 1 else ''}, {warnings} warning"
    out += "s" if warnings != 1 else ""
    return out + (f", {info} info" if info else "")


def as_json(findings: list[LintFinding]) -> str:
    """A JSON list of findings (see :meth:`LintFinding.to_json`)."""
    return json.dumps([f.to_json() for f in findings], indent=2)


def sarif(findings: list[LintFinding]) -> str:
    """A SARIF 2.1.0 log with one run (GitHub code scanning reads it)."""
    index = {r.id: i for i, r in enumerate(RULES)}
    rules = [
        {
            "id": r.id,
            "name": r.id,
            "shortDescription": {"text": r.title},
            "help": {"text": r.hint},
            "defaultConfiguration": {"level": _LEVEL[r.severity]},
        }
        for r in RULES
    ]
    results: list[dict[str, Any]] = []
    for f in findings:
        result: dict[str, Any] = {
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": _LEVEL[f.severity],
            "message": {"text": f"{f.message} Fix: {f.hint}"},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": Path(f.path).as_posix()},
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.col,
                            "endLine": f.end_line,
                            "endColumn": f.end_col,
                        },
                    }
                }
            ],
            "partialFingerprints": {"gradwatchFingerprint/v1": f.fingerprint},
            "properties": {"confidence": f.confidence, "qualname": f.qualname},
        }
        if f.suppressed:
            result["suppressions"] = [{"kind": "inSource"}]
        results.append(result)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gradwatch",
                        "version": __version__,
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)
