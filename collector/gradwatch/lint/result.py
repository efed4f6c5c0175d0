"""A lint finding, and its form as a run finding (``source: "lint"``)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gradwatch.core.contract import Severity
from gradwatch.core.lint_catalogue import BY_ID

Confidence = Literal["high", "medium"]


@dataclass(frozen=True)
class LintFinding:
    """One finding of one rule at one place."""

    rule: str
    severity: Severity
    confidence: Confidence
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    qualname: str
    message: str
    fingerprint: str
    suppressed: bool = False

    @property
    def hint(self) -> str:
        return BY_ID[self.rule].hint

    def to_json(self) -> dict[str, Any]:
        """The ``--format json`` form (every field, plus the fix hint)."""
        return asdict(self) | {"hint": self.hint}

    def to_meta(self) -> dict[str, Any]:
        """The wire form of a run finding (see
        :meth:`gradwatch.checks.findings.Finding.to_meta`)."""
        return {
            "check": self.rule,
            "severity": self.severity,
            "step": None,
            "optimizer": None,
            "param": None,
            "message": self.message,
            "hint": self.hint,
            "details": {
                "path": self.path,
                "line": self.line,
                "col": self.col,
                "end_line": self.end_line,
                "qualname": self.qualname,
                "confidence": self.confidence,
                "fingerprint": self.fingerprint,
            },
            "source": "lint",
            "t": None,
        }

    def line_text(self) -> str:
        """``path:line:col: severity rule: message``."""
        conf = "" if self.confidence == "high" else " (medium confidence)"
        return (
            f"{self.path}:{self.line}:{self.col}: {self.severity} {self.rule}: {self.message}{conf}"
        )


def fingerprint(rule: str, path: str, qualname: str, code: str) -> str:
    """A stable id of a finding that survives line shifts: rule, file, enclosing function
    and the whitespace-normalised code of the flagged line."""
    normal = " ".join(code.split())
    digest = hashlib.sha256(f"{rule}\0{path}\0{qualname}\0{normal}".encode())
    return digest.hexdigest()[:16]
