"""docs/checks.md is generated from the check registry (gradwatch.core.checks) and must be
committed fresh."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gradwatch.checks.catalogue_doc import render
from gradwatch.core.catalogue import CATALOGUE, CHECKPOINT_CHECKS, CHECKS, POLICIES
from gradwatch.core.incidents import RULES

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "checks.md"


def test_the_committed_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/checks.md is out of date: run python scripts/gen_checks_doc.py"
    )


def test_the_script_checks_and_writes_the_page() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_checks_doc.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_every_check_policy_and_incident_rule_is_documented() -> None:
    page = render()
    assert [c.id for c in CATALOGUE] == list(CHECKS)
    for check in CHECKS:
        assert page.count(f"### `{check}`\n") == 1
    for policy in POLICIES:
        assert f"- `{policy}` — " in page
    assert "optimizer-nondeterminism" in page
    for rule in RULES:
        assert f"| `{rule.kind}` ({rule.label}) |" in page
    assert not re.search(r"\{\w+\.\w+", page)  # every threshold placeholder was filled
    section = page.split("### `nonfinite-param`")[1].split("###")[0]
    assert ("`checkpoint`" in section) == ("nonfinite-param" in CHECKPOINT_CHECKS)
