"""``gradwatch run`` lints the script it starts, stores the findings with the run, and a
runtime finding of the same bug marks the lint finding confirmed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradwatch import cli
from gradwatch.commands.run import script_of
from gradwatch.core.local_reader import latest_run

BUGGY = """
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    {zero}
    F.cross_entropy(F.softmax(model(x), dim=1), y).backward()
    opt.step()
print("done")
"""


def run_script(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], zero: str, *flags: str
) -> tuple[int, str]:
    path = tmp_path / "train.py"
    path.write_text(BUGGY.format(zero=zero))
    code = cli.main(["run", *flags, "--", sys.executable, str(path)])
    return code, capfd.readouterr().err


def findings_json(capfd: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert cli.main(["findings", "--json"]) == 0
    items: list[dict[str, object]] = json.loads(capfd.readouterr().out)
    return items


def test_lint_findings_are_stored_with_the_run_and_confirmed_at_runtime(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, err = run_script(tmp_path, capfd, "pass")
    assert code == 0
    assert "gradwatch run: lint: 2 errors, 0 warnings in" in err
    assert "lint: 2 findings, 1 confirmed at runtime" in err  # the end-of-run summary
    items = findings_json(capfd)
    lint = {i["check"]: i for i in items if i["source"] == "lint"}
    assert set(lint) == {"stale-grad", "softmax-into-cross-entropy"}
    stale = lint["stale-grad"]
    assert stale["confirmed"] is True and stale["step"] is None
    assert stale["confirmed_by"] == {"check": "stale-grad", "step": 2}
    details = stale["details"]
    assert isinstance(details, dict) and details["line"] == 13 and details["confidence"] == "high"
    assert lint["softmax-into-cross-entropy"]["confirmed"] is False
    runtime = [i for i in items if i["source"] == "runtime"]
    assert runtime and all(i["confirmed"] is None for i in runtime)
    assert cli.main(["findings"]) == 0
    text = capfd.readouterr().out
    assert "stale-grad lint " in text and "[confirmed at runtime: stale-grad at step 2]" in text


def test_unconfirmed_lint_errors_do_not_fail_the_runtime_gate_and_no_lint_skips(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, err = run_script(tmp_path, capfd, "opt.zero_grad()")
    assert code == 0 and "lint: 1 error, 0 warnings" in err
    assert cli.main(["findings", "--fail-on", "error"]) == 0  # runtime found nothing wrong
    out = capfd.readouterr().out
    assert "softmax-into-cross-entropy lint" in out and "lint: 1 finding, 0 confirmed" in out
    first = latest_run().name
    code, err = run_script(tmp_path, capfd, "opt.zero_grad()", "--no-lint")
    assert code == 0 and "lint:" not in err
    assert latest_run().name != first
    assert cli.main(["findings", "--json"]) == 0
    assert [i for i in json.loads(capfd.readouterr().out) if i["source"] == "lint"] == []


def test_script_of_finds_the_script_a_command_runs(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    assert script_of(["python", "-u", str(script), "--lr", "3"]) == script
    assert script_of(["torchrun", "--nproc-per-node", "2", str(script)]) == script
    assert script_of([str(script)]) == script
    assert script_of(["python", "-m", "package.train"]) is None
    assert script_of(["python", str(tmp_path / "missing.py")]) is None


def test_the_pre_commit_hook_runs_the_linter(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    root = Path(__file__).parents[3]
    [hook] = yaml.safe_load((root / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "gradwatch-lint" and hook["types"] == ["python"]
    bug = root / "tests/collector/lint/fixtures/bug/grad_zeroed_before_step.py"
    entry = [Path(sys.executable).with_name(hook["entry"].split()[0]), *hook["entry"].split()[1:]]
    done = subprocess.run([*entry, str(bug)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "grad-zeroed-before-step" in done.stdout
