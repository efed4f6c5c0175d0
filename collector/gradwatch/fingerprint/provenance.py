"""Provenance of a run's code and environment: git state, installed packages, the script.

The slow half of the fingerprint (:mod:`gradwatch.fingerprint.take` holds the fast half), run on
a background thread at ``watch()``. ``code_hash`` is the SHA-256 of ``[git commit, git diff
hash, script hash]``; see :mod:`gradwatch.fingerprint.take` for why untracked files stay out.
Never raises: what cannot be read is ``None`` and listed in ``errors``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gradwatch.session import quietproc

__all__ = ["collect_slow"]

_GIT_TIMEOUT_S = 5.0
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_UNTRACKED_MAX_FILES = 1000
_UNTRACKED_MAX_BYTES = 1 << 20
_GIT_FIELDS = ("commit", "branch", "dirty", "diff_hash", "untracked_count", "untracked_hash")


def collect_slow(*, script: str | None, cwd: str) -> dict[str, Any]:
    """The part of the fingerprint that may take about a second; never raises.

    ``script`` is the ``__main__`` file (relative to ``cwd`` or absolute); git is asked
    about the repository holding the script, else the one holding ``cwd``. Fields that
    cannot be known (no git, not a repository, no commit yet, no script) are None.
    """
    errors: list[str] = []
    path = None if script is None else Path(cwd, script)
    script_hash = _guard(
        errors, "script", lambda: _file_sha256(path) if path and path.is_file() else None
    )
    git = _guard(errors, "git", lambda: _git_state(str(path.parent) if path else cwd))
    git = git or dict.fromkeys(_GIT_FIELDS)
    packages = _guard(errors, "packages", _packages) or (None, None)
    code = [git["commit"], git["diff_hash"], script_hash]
    return {
        "git": git,
        "script": None if path is None else str(path),
        "script_hash": script_hash,
        "code_hash": None if code == [None] * 3 else _sha256(json.dumps(code).encode()),
        "packages_hash": packages[0],
        "packages_count": packages[1],
        "errors": errors,
    }


def _guard(errors: list[str], what: str, compute: Callable[[], Any]) -> Any:
    try:
        return compute()
    except Exception as e:
        errors.append(f"{what}: {type(e).__name__}: {e}")
        return None


def _git(args: list[str], cwd: str) -> bytes | None:
    """stdout of a git command, or None when git is missing, fails or times out."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            [quietproc.command("git"), *args],  # by path: see gradwatch.session.quietproc
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _git_state(cwd: str) -> dict[str, Any] | None:
    top_out = _git(["rev-parse", "--show-toplevel"], cwd)
    if top_out is None:
        return None
    top = top_out.decode().strip()
    commit = _git(["rev-parse", "--verify", "--quiet", "HEAD"], top)
    branch = _git(["symbolic-ref", "--short", "--quiet", "HEAD"], top)
    # Paths and contents of changed tracked files rather than the diff text, so that
    # diff settings (renames, algorithm, prefixes, colour) cannot change the hash.
    base = commit.decode().strip() if commit else _EMPTY_TREE
    changed = _git(["diff", base, "--name-only", "-z", "--no-renames", "--no-relative"], top)
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], top)
    changed_paths = _split(changed)
    untracked_paths = _split(untracked)
    return {
        "commit": commit.decode().strip() if commit else None,
        "branch": branch.decode().strip() if branch else None,
        "dirty": None if changed is None else bool(changed_paths),
        "diff_hash": None if changed is None else _tree_hash(top, changed_paths, None),
        "untracked_count": None if untracked is None else len(untracked_paths),
        "untracked_hash": None
        if untracked is None
        else _tree_hash(top, untracked_paths[:_UNTRACKED_MAX_FILES], _UNTRACKED_MAX_BYTES),
    }


def _split(out: bytes | None) -> list[str]:
    return sorted(os.fsdecode(p) for p in (out or b"").split(b"\0") if p)


def _tree_hash(top: str, paths: list[str], max_bytes: int | None) -> str:
    """SHA-256 over (path, content hash) pairs; larger files than max_bytes by size only."""
    entries = []
    for rel in paths:
        path = Path(top, rel)
        if not path.is_file():
            entries.append([rel, "deleted" if not path.exists() else "not-a-file"])
        elif max_bytes is not None and path.stat().st_size > max_bytes:
            entries.append([rel, f"size:{path.stat().st_size}"])
        else:
            entries.append([rel, _file_sha256(path)])
    return _sha256(json.dumps(entries, separators=(",", ":")).encode())


def _packages() -> tuple[str, int]:
    pins = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or "?"
        pins.add(f"{name.lower().replace('_', '-').replace('.', '-')}=={dist.version}")
    return _sha256("\n".join(sorted(pins)).encode()), len(pins)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
