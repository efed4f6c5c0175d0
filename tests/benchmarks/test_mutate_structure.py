"""benchmarks/corpus/mutate_structure.py: the structure changes mid-run (a clipping call or a
scheduler step skipped from step N, a model left in eval after step N), their edits checked
statement by statement, and each mutant run under `gradwatch run` and caught end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks import loops
from tests.benchmarks.test_mutate import added, mutant

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
import inject  # noqa: E402
import mutate  # noqa: E402

GUARD = "if _gw_state.get('structure_backward', 0) < 50:"
COUNT = "_gw_state['structure_backward'] = _gw_state.get('structure_backward', 0) + 1"


def test_the_structure_mutations_are_registered_with_the_others() -> None:
    for name in ("clip-dropped", "scheduler-dropped", "eval-after-validation"):
        assert "structure-safeguard" in mutate.MUTATIONS[name].expected


def test_clip_dropped_counts_the_clips_and_guards_them() -> None:
    assert added("plain", "clip-dropped") == [
        "_gw_state = {}",
        "_gw_state['structure_clips'] = _gw_state.get('structure_clips', 0) + 1",
        "if _gw_state.get('structure_clips', 0) <= 50:",
    ]
    assert mutate.apply(loops.ALL["epochs"], "clip-dropped") is None  # nothing clips there


def test_scheduler_dropped_guards_every_scheduler_step() -> None:
    text = mutant("epochs", "scheduler-dropped")
    assert text[text.index("loss.backward()") + 1] == COUNT
    assert text.index(GUARD) + 1 == text.index("scheduler.step()")
    text = mutant("funcs", "scheduler-dropped")
    assert text.index(GUARD) + 1 == text.index("scheduler.step()")
    assert mutate.apply(loops.ALL["plain"], "scheduler-dropped") is None


def test_eval_after_validation_sticks_the_model_in_eval_after_step_n() -> None:
    text = mutant("epochs", "eval-after-validation")
    at = text.index("loss.backward()")
    assert text[at + 1 : at + 6] == [
        "_gw_state['structure_backward'] = _gw_state.get('structure_backward', 0) + 1",
        "if _gw_state.get('structure_backward', 0) == 50 and (not _gw_state.get('stuck_in_eval')):",
        "_gw_state['stuck_in_eval'] = True",
        "model.eval()",
        "type(model).train = lambda self, mode=True: self",
    ]


PROGRAM = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 300)
for step in range(90):
    model.train()
    x = torch.randn(16, 8)
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bug", "step"),
    [("clip-dropped", 31), ("scheduler-dropped", 31), ("eval-after-validation", 30)],
)
def test_each_structure_mutant_is_caught_at_its_first_differing_step(
    tmp_path: Path, bug: str, step: int
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text(PROGRAM)
    assert inject.mutate_tree(tree, "train.py", bug, 30) == tree / "train.py"
    data = tmp_path / "gw"
    cmd = [sys.executable, "-m", "gradwatch", "run", "--data-dir", str(data), "--",
           sys.executable, "train.py"]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "collector"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    findings = inject.read_findings(data)
    got = inject.judge(mutate.MUTATIONS[bug].expected, findings)
    assert got["caught"], findings
    safeguard = [f for f in findings if f["check"] == "structure-safeguard"]
    assert [f["step"] for f in safeguard] == [step], safeguard
