"""The slow half of the fingerprint: git state, installed packages, the script, code hash."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gradwatch.fingerprint.provenance import collect_slow

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "train.py").write_text("print('v1')\n")
    (root / "data.bin").write_bytes(bytes(range(256)))
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


@needs_git
def test_clean_repo(repo: Path) -> None:
    slow = collect_slow(script="train.py", cwd=str(repo))
    assert len(slow["git"]["commit"]) == 40
    assert slow["git"]["branch"] == "main"
    assert slow["git"]["dirty"] is False
    assert slow["git"]["untracked_count"] == 0
    assert slow["script"] == str(repo / "train.py")
    assert slow["script_hash"] is not None
    assert slow["code_hash"] is not None
    assert slow["errors"] == []
    assert slow["packages_count"] > 0
    assert len(slow["packages_hash"]) == 64
    json.dumps(slow, allow_nan=False)


@needs_git
def test_tracked_changes_change_diff_and_code_hash(repo: Path) -> None:
    clean = collect_slow(script=None, cwd=str(repo))
    (repo / "data.bin").write_bytes(bytes(range(255, -1, -1)))  # binary change
    dirty = collect_slow(script=None, cwd=str(repo))
    assert dirty["git"]["dirty"] is True
    assert dirty["git"]["diff_hash"] != clean["git"]["diff_hash"]
    assert dirty["code_hash"] != clean["code_hash"]
    (repo / "data.bin").write_bytes(bytes(range(256)))
    assert collect_slow(script=None, cwd=str(repo))["code_hash"] == clean["code_hash"]


@needs_git
def test_untracked_files_are_hashed_apart_from_code(repo: Path) -> None:
    clean = collect_slow(script="train.py", cwd=str(repo))
    (repo / "log.txt").write_text("step 1\n")
    logged = collect_slow(script="train.py", cwd=str(repo))
    assert logged["git"]["untracked_count"] == 1
    assert logged["git"]["untracked_hash"] != clean["git"]["untracked_hash"]
    assert logged["code_hash"] == clean["code_hash"]
    (repo / "new_script.py").write_text("print('new')\n")
    new = collect_slow(script="new_script.py", cwd=str(repo))
    assert new["code_hash"] != clean["code_hash"]  # the untracked script counts via its hash


@needs_git
def test_repo_without_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    git(tmp_path, "init", "-q", "-b", "trunk")
    slow = collect_slow(script=None, cwd=str(tmp_path))
    assert slow["git"]["commit"] is None
    assert slow["git"]["branch"] == "trunk"
    assert slow["errors"] == []


@needs_git
def test_outside_a_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    slow = collect_slow(script=None, cwd=str(tmp_path))
    assert set(slow["git"].values()) == {None}
    assert slow["code_hash"] is None
    (tmp_path / "train.py").write_text("pass\n")
    assert collect_slow(script="train.py", cwd=str(tmp_path))["code_hash"] is not None


def test_without_git_on_path(repo_or_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo_or_dir / "empty-bin"))
    slow = collect_slow(script="missing.py", cwd=str(repo_or_dir))
    assert set(slow["git"].values()) == {None}
    assert slow["script_hash"] is None
    assert slow["code_hash"] is None
    assert slow["errors"] == []


@pytest.fixture
def repo_or_dir(tmp_path: Path) -> Path:
    if shutil.which("git") is not None:
        git(tmp_path, "init", "-q")
    return tmp_path
