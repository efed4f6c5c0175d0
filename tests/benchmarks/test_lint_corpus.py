"""benchmarks/corpus/lint_corpus.py: the Python files of a commit, linted one by one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
sys.path.insert(0, str(HERE))

import lint_corpus  # noqa: E402

BUG = """import torch
from torch import nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    loss = model(torch.randn(2, 4)).sum()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    loss.backward()
    opt.step()
"""


def test_the_python_files_of_a_commit_are_linted_one_by_one(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "train.py").write_text(BUG)
    (repo / "fine.py").write_text(BUG.replace(
        "    nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    loss.backward()\n",
        "    loss.backward()\n    nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    ))  # fmt: skip
    (repo / "data.txt").write_text("not python\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dest = tmp_path / "out"
    assert lint_corpus.extract(repo / ".git", commit.strip(), dest) == 2
    assert not (dest / "data.txt").exists()
    found = lint_corpus.lint_files(dest)
    assert list(found) == ["pkg/train.py"]  # the correct file draws nothing
    assert [(r, n) for r, n, _ in found["pkg/train.py"]] == [("clip-before-backward", 9)]
