"""``gradwatch run``: real, unmodified scripts run watched in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradwatch import cli
from gradwatch.core.local_reader import latest_run, list_runs, load_run

TRAIN = """
import json, sys
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    {zero_grad}
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
print(json.dumps([name for name, _ in model.named_parameters()]))
print("weight sum", round(float(model[0].weight.sum()), 6))
sys.exit({exit})
"""

GAN = """
import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
D = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(6):
    real = torch.randn(16, 2) + 3
    fake = G(torch.randn(16, 2))
    opt_d.zero_grad()
    d_loss = bce(D(real), torch.ones(16, 1)) + bce(D(fake.detach()), torch.zeros(16, 1))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    bce(D(fake), torch.ones(16, 1)).backward()
    opt_g.step()
print("trained")
"""


def script(tmp_path: Path, text: str, name: str = "train.py", **fill: object) -> Path:
    path = tmp_path / name
    path.write_text(text.format(**fill) if fill else text)
    return path


def watched(capfd: pytest.CaptureFixture[str], path: Path, *flags: str) -> tuple[int, str, str]:
    """``gradwatch run FLAGS -- python PATH`` (this process is the parent; the child's
    output lands on the captured file descriptors)."""
    code = cli.main(["run", *flags, "--", sys.executable, str(path)])
    out, err = capfd.readouterr()
    return code, out, err


def findings(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["findings", *args])
    return code, capfd.readouterr().out


def test_missing_zero_grad_is_named_on_one_line_and_fails_the_gate(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = watched(capfd, script(tmp_path, TRAIN, zero_grad="pass", exit=0))
    assert code == 0
    stale = [line for line in err.splitlines() if "stale-grad" in line]
    assert len(stale) == 1, err
    assert "at step 2" in stale[0] and "zero_grad()" in stale[0], stale[0]
    run_dir = latest_run()
    assert run_dir.name in err  # the run id is printed, with where to look
    assert f"gradwatch findings {run_dir.name}" in err
    # the recorded names are the model's own
    names = json.loads(out.splitlines()[0])
    assert load_run(run_dir).tensor_names == names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert findings(capfd, "--fail-on", "error")[0] == 1


def test_fixed_script_passes_and_keeps_its_output_and_exit_status(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = script(tmp_path, TRAIN, zero_grad="opt.zero_grad()", exit=3)
    plain = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    code, out, err = watched(capfd, path, "--project", "ci")
    assert plain.returncode == code == 3
    assert out == plain.stdout  # same output, same trained weights
    assert "gradwatch run: watching" in err
    assert "0 errors, 0 warnings" in err
    assert findings(capfd, "--fail-on", "warning")[0] == 0
    assert load_run(latest_run()).start["project"] == "ci"


def test_raise_policy_stops_the_script_before_the_bad_update(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = script(tmp_path, TRAIN, zero_grad="pass", exit=0)
    code, out, err = watched(capfd, path, "--check", "stale-grad=raise")
    assert code == 1
    assert "gradwatch.core.errors.IntegrityError" in err and "stale-grad at step 2" in err
    assert "weight sum" not in out
    end = load_run(latest_run()).end
    assert end is not None and end["status"] == "failed"


def test_gan_is_one_run_with_both_models_named(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = watched(capfd, script(tmp_path, GAN))
    assert (code, out) == (0, "trained\n")
    assert len(list_runs()) == 1
    run = load_run(latest_run())
    assert [m["key"] for m in run.start["models"]] == ["G", "D"]
    assert run.tensors_of(0) == ["G.0.weight", "G.0.bias", "G.2.weight", "G.2.bias"]
    assert run.tensors_of(1) == ["D.0.weight", "D.0.bias", "D.2.weight", "D.2.bias"]
    code, text = findings(capfd, "--fail-on", "warning")
    assert code == 0, text


def test_bad_flags_and_missing_command_are_usage_errors(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["run", "--check", "stale-grad=explode", "--", "python", "x.py"]) == 2
    assert "stale-grad" in capfd.readouterr().err
    assert cli.main(["run", "--"]) == 2
    assert "usage" in capfd.readouterr().err
    assert cli.main(["run", "--", "/nonexistent/command"]) == 127
    assert list_runs() == []


def test_a_command_without_torch_is_reported_as_unwatched(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["run", "--", sys.executable, "-c", "print('hi'); raise SystemExit(5)"])
    out, err = capfd.readouterr()
    assert (code, out) == (5, "hi\n")
    assert "no model was watched" in err
