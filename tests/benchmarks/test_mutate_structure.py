"""benchmarks/corpus/mutate_structure.py: the structure changes mid-run (a clipping call or a
scheduler step skipped from step N, a model left in eval after step N, the param groups
rebuilt without their weight decay) and the replicate cases (one replicate of three with a
frozen layer, no clipping, no autocast), their edits checked statement by statement, and
each mutant run under `gradwatch run` and caught end to end."""

from __future__ import annotations

import os
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


MUTANT_FLAG = "_gw_mutant = __import__('os').environ.get('GW_MUTANT') == '1'"


def test_param_group_rebuilt_rebuilds_the_groups_without_weight_decay_after_backward_n() -> None:
    text = mutant("plain", "param-group-rebuilt")
    at = text.index("loss.backward()")
    assert text[at + 1 : at + 8] == [
        COUNT,
        "if _gw_state.get('structure_backward', 0) == 50 and "
        "(not _gw_state.get('groups_rebuilt')):",
        "_gw_state['groups_rebuilt'] = True",
        "_gw_groups = [dict(_gw_g) for _gw_g in optimizer.param_groups]",
        "optimizer.param_groups.clear()",
        "for _gw_g in _gw_groups:",
        "optimizer.add_param_group({**_gw_g, 'weight_decay': 0.0})",
    ]
    assert mutate.MUTATIONS["param-group-rebuilt"].severity == "info"


def test_the_replicate_cases_are_active_only_with_the_flag() -> None:
    assert added("plain", "replicate-no-clip") == [MUTANT_FLAG, "if not _gw_mutant:"]
    frozen = added("plain", "replicate-frozen-layer")
    assert frozen[:4] == [
        MUTANT_FLAG,
        "_gw_state = {}",
        "if _gw_mutant and (not _gw_state.get('frozen_layer')):",
        "_gw_state['frozen_layer'] = True",
    ]
    assert "for _gw_m in model.modules():" in frozen
    assert mutate.apply(loops.ALL["plain"], "replicate-no-autocast") is None  # no autocast
    amp = "with torch.autocast('cpu', dtype=torch.bfloat16):\n    y = 1\n"
    out = mutate.apply(amp, "replicate-no-autocast")
    assert out is not None
    assert "torch.autocast('cpu', dtype=torch.bfloat16, enabled=not _gw_mutant)" in out
    assert all(mutate.MUTATIONS[n].replicate for n in ("replicate-frozen-layer",
               "replicate-no-clip", "replicate-no-autocast"))  # fmt: skip


REPLICA = """\
import os
import torch
from torch import nn

torch.manual_seed(int(os.environ["SEED"]))
model = nn.Sequential(nn.Embedding(16, 8), nn.Flatten(), nn.Linear(16, 8), nn.ReLU(),
                      nn.Linear(8, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
for step in range(60):
    x = torch.randint(0, 16, (8, 2))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    loss = nn.functional.cross_entropy(out.float(), (x[:, 0] > 7).long())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""


def _run(tree: Path, data: Path, seed: int, mutant: bool = False) -> None:
    cmd = [sys.executable, "-m", "gradwatch", "run", "--data-dir", str(data), "--",
           sys.executable, "train.py"]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "collector"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
           "SEED": str(seed), **({"GW_MUTANT": "1"} if mutant else {})}  # fmt: skip
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "bug", ["replicate-frozen-layer", "replicate-no-clip", "replicate-no-autocast"]
)
def test_each_replicate_mutant_breaks_its_group_at_step_1(tmp_path: Path, bug: str) -> None:
    """Two replicates without the flag, then the mutant, each its own `gradwatch run`, from
    one mutated tree (one code hash) in one data dir."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text(REPLICA)
    assert inject.mutate_tree(tree, "train.py", bug, 30) == tree / "train.py"
    data = tmp_path / "gw"
    _run(tree, data, 1)
    _run(tree, data, 2)
    assert inject.read_findings(data) == []  # the second replicate: one good run before it
    _run(tree, data, 3, mutant=True)
    findings = inject.read_findings(data)
    got = inject.judge(mutate.MUTATIONS[bug].expected, findings)
    assert got["caught"], findings
    assert got["step"] == 1, findings
    breaks = [f for f in findings if f["check"] == "group-invariant"]
    assert [f["step"] for f in breaks] == [1], breaks  # one invariant named, at step 1


@pytest.mark.slow
def test_param_group_rebuilt_is_a_structure_change_at_its_step(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text(REPLICA)
    assert inject.mutate_tree(tree, "train.py", "param-group-rebuilt", 30)
    data = tmp_path / "gw"
    _run(tree, data, 1)
    findings = inject.read_findings(data)
    got = inject.judge(mutate.MUTATIONS["param-group-rebuilt"].expected, findings, "info")
    assert got["caught"], findings
    assert got["step"] == 30, findings
    change = next(f for f in findings if f["check"] == "structure-change")
    assert "weight_decay is 0.0 instead of 0.05" in change["message"]
    assert os.path.exists(data)
