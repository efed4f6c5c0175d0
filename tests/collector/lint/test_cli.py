"""``gradwatch lint``: formats, exit status, rule selection, suppression comments."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from gradwatch import cli
from gradwatch.core.catalogue import CHECKS
from gradwatch.lint import IDS, RULES, lint_paths

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parents[3]
STALE = FIXTURES / "bug" / "stale_grad_zero_before_loop.py"  # one error
UNSEEDED = FIXTURES / "bug" / "unseeded_run.py"  # one info (a warning when selected)


def lint(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["lint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_names_file_line_rule_and_fix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = lint(capsys, str(STALE))
    assert code == 1
    first, fix, last = out.splitlines()
    assert first.startswith(f"{STALE}:14:5: error stale-grad: opt.step() runs every iteration")
    assert fix.strip().startswith("Fix: call optimizer.zero_grad()")
    assert last == "1 error, 0 warnings in 1 file"


def test_fail_on_sets_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    selected = ("--select", "unseeded-run")
    assert lint(capsys, str(UNSEEDED), *selected)[0] == 0  # warnings pass the default gate
    assert lint(capsys, str(UNSEEDED), *selected, "--fail-on", "warning")[0] == 1
    assert lint(capsys, str(FIXTURES / "correct"), "--fail-on", "warning")[0] == 0


def test_unseeded_run_is_info_unless_selected(capsys: pytest.CaptureFixture[str]) -> None:
    # A correct program need not be reproducible: info by default, never failing a gate.
    code, out, _ = lint(capsys, str(UNSEEDED), "--fail-on", "warning")
    assert code == 0
    assert "info unseeded-run: this script trains but never seeds torch" in out
    assert out.splitlines()[-1] == "0 errors, 0 warnings, 1 info in 1 file"
    code, out, _ = lint(capsys, str(UNSEEDED), "--select", "unseeded-run,stale-grad")
    assert "warning unseeded-run:" in out and out.splitlines()[-1].startswith("0 errors, 1 warn")
    # ignoring another rule is not selecting this one
    assert "info unseeded-run:" in lint(capsys, str(UNSEEDED), "--ignore", "stale-grad")[1]


def test_json_lists_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = lint(capsys, str(STALE), "--format", "json")
    [item] = json.loads(out)
    assert code == 1
    assert item["rule"] == "stale-grad" and (item["line"], item["col"]) == (14, 5)
    assert item["severity"] == "error" and item["confidence"] == "high"
    assert item["qualname"] == "<module>" and len(item["fingerprint"]) == 16
    assert item["hint"].startswith("call optimizer.zero_grad()") and not item["suppressed"]


def test_sarif_is_a_2_1_0_log_with_rules_and_fingerprints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = lint(capsys, str(FIXTURES / "bug"), "--format", "sarif")
    log = json.loads(out)
    assert code == 1 and log["version"] == "2.1.0"
    [run] = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(IDS)
    assert {r["ruleId"] for r in run["results"]} == set(IDS)
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
        assert len(result["partialFingerprints"]["gradwatchFingerprint/v1"]) == 16


def test_fingerprint_survives_a_line_shift(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(STALE.read_text())
    before = lint_paths([path]).findings[0]
    path.write_text('"""Now with a docstring."""\n\n' + STALE.read_text())
    after = lint_paths([path]).findings[0]
    assert after.line == before.line + 2
    assert after.fingerprint == before.fingerprint


def test_select_and_ignore(capsys: pytest.CaptureFixture[str]) -> None:
    bugs = str(FIXTURES / "bug")
    code, out, _ = lint(capsys, bugs, "--format", "json", "--select", "stale-grad,unseeded-run")
    assert {f["rule"] for f in json.loads(out)} == {"stale-grad", "unseeded-run"}
    code, out, _ = lint(capsys, bugs, "--format", "json", "--ignore", "stale-grad")
    rules = {f["rule"] for f in json.loads(out)}
    assert "stale-grad" not in rules and len(rules) == len(IDS) - 1
    code, _, _ = lint(capsys, str(STALE), "--ignore", "stale-grad")
    assert code == 0


def test_bad_input_is_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = lint(capsys, str(STALE), "--select", "stale-grads")
    assert code == 2 and "unknown rule id stale-grads; known ids: stale-grad," in err
    code, _, err = lint(capsys, str(tmp_path / "nope.py"))
    assert code == 2 and "no such file or folder" in err
    (tmp_path / "broken.py").write_text("for x in y\n")
    code, _, err = lint(capsys, str(tmp_path))
    assert code == 2 and "broken.py:1: cannot parse" in err
    assert lint(capsys)[0] == 2


SUPPRESSED = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in data:{loop}
    nn.functional.mse_loss(model(x), y).backward()
    opt.step(){line}
"""


@pytest.mark.parametrize(
    ("loop", "line", "silenced"),
    [
        ("", "  # gradwatch: ignore[stale-grad] -- whole-epoch accumulation", True),
        ("  # gradwatch: ignore[stale-grad]", "", True),
        ("", "  # gradwatch: ignore", True),
        ("", "  # gradwatch: ignore[unseeded-run, stale-grad]", True),
        ("", "  # gradwatch: ignore[grad-zeroed-before-step]", False),
        ("", "  # noqa", False),
    ],
)
def test_suppression_on_the_line_or_the_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loop: str, line: str, silenced: bool
) -> None:
    path = tmp_path / "train.py"
    path.write_text(SUPPRESSED.format(loop=loop, line=line))
    code, out, _ = lint(capsys, str(path))
    assert code == (0 if silenced else 1)
    assert ("stale-grad" in out) is not silenced
    code, out, _ = lint(capsys, str(path), "--show-suppressed", "--format", "json")
    [item] = json.loads(out)
    assert item["suppressed"] is silenced and code == (0 if silenced else 1)


def test_folders_skip_virtualenvs_and_hidden_folders(tmp_path: Path) -> None:
    for folder in (".venv", "venv", ".git", "__pycache__", "src"):
        (tmp_path / folder).mkdir()
        shutil.copy(STALE, tmp_path / folder / "train.py")
    result = lint_paths([tmp_path])
    assert result.files == 1 and [f.path for f in result.findings] == [
        str(tmp_path / "src" / "train.py")
    ]


def test_list_rules_names_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = lint(capsys, "--list-rules")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list(IDS)


def test_ids_shared_with_runtime_checks_name_the_same_bug() -> None:
    shared = {r.id for r in RULES if r.id in CHECKS}
    assert shared == {
        "stale-grad",
        "grad-zeroed-before-step",
        "accumulation-wiped",
        "clip-before-backward",
        "param-not-in-optimizer",
        "eval-mode-training",
    }
    for rule in RULES:
        assert set(rule.confirmed_by) <= set(CHECKS), rule.id
        if rule.id in CHECKS:
            assert rule.confirmed_by == (rule.id,)


def test_every_rule_is_in_the_lint_docs() -> None:
    docs = [ROOT / "docs" / "lint.md", ROOT / "docs" / "lint-audit.md"]  # the lint pages
    text = "".join(p.read_text() for p in docs)
    for rule in IDS:
        assert f"`{rule}`" in text, rule


def test_the_repository_lints_fast_and_its_examples_clean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    start = time.perf_counter()
    result = lint_paths([ROOT / "examples", ROOT / "collector", ROOT / "benchmarks"])
    took = time.perf_counter() - start
    assert not result.errors and result.files > 30
    assert [f for f in result.findings if f.severity == "error"] == []
    assert took < 120, f"{took:.1f} s"  # a hang guard (2 loaded cores); the README has the figure
    assert lint(capsys, str(ROOT / "examples"), "--fail-on", "warning")[0] == 0
