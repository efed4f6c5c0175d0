"""Put a program's repository tree, at its pinned commit, into a folder; run its setup.

The tree comes from a local bare mirror when there is one (``$GW_CORPUS_MIRRORS``, default
``/work/.mirror``: ``<owner>+<name>/`` holding a git dir, as the fetch tool lays them out),
else from a bare clone of ``https://github.com/<owner>/<name>`` kept under the cache. The
export is ``git archive <commit> | tar -x``: no ``.git`` in the tree, nothing of ours in it.
A tree is extracted once per (project, commit); a program's setup commands run once per
tree and set of commands (a marker file remembers them).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from spec import SHIMS, Program

MIRRORS = Path(os.environ.get("GW_CORPUS_MIRRORS", "/work/.mirror"))
CACHE = Path(os.environ.get("GW_CORPUS_CACHE", Path.home() / ".cache" / "gradwatch-corpus"))
SOURCE_MARK = ".corpus-source"
MISSING_MARK = ".corpus-missing"  # files of the commit the mirror lacks


def tree_dir(program: Program, cache: Path = CACHE) -> Path:
    """Where `run.py` keeps the tree of a program's (project, commit)."""
    return cache / "trees" / f"{program.project.replace('/', '+')}@{program.commit[:12]}"


def _is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def find_git_dir(project: str, mirrors: Path = MIRRORS, cache: Path = CACHE) -> Path | None:
    """A local git dir of ``owner/name``: a mirror (the folder or one up to two levels
    below it), else our own bare clone in the cache; None when there is neither."""
    for root in (mirrors / project.replace("/", "+"), cache / "git" / project.replace("/", "+")):
        if not root.is_dir():
            continue
        for candidate in (root, root / ".git", *sorted(root.glob("*")), *sorted(root.glob("*/*"))):
            if candidate.is_dir() and _is_git_dir(candidate):
                return candidate
    return None


def _has_commit(git_dir: Path, commit: str) -> bool:
    cmd = ["git", "--git-dir", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def git_dir_for(program: Program, mirrors: Path = MIRRORS, cache: Path = CACHE) -> Path:
    """The local git dir holding the program's commit, cloning from GitHub if need be."""
    found = find_git_dir(program.project, mirrors, cache)
    if found is not None and _has_commit(found, program.commit):
        return found
    clone = cache / "git" / program.project.replace("/", "+")
    url = f"https://github.com/{program.project}.git"
    if _is_git_dir(clone):
        subprocess.run(["git", "--git-dir", str(clone), "fetch", "--quiet", url], check=True)
    else:
        clone.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "--quiet", "--bare", url, str(clone)], check=True)
    if not _has_commit(clone, program.commit):
        raise RuntimeError(f"{program.project} has no commit {program.commit}")
    return clone


def _archive(git_dir: Path, commit: str, into: Path) -> bool:
    """``git archive <commit> | tar -x``; False when git cannot (a blob is missing)."""
    archive = subprocess.Popen(
        ["git", "--git-dir", str(git_dir), "archive", commit],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    untar = subprocess.run(
        ["tar", "-x", "-C", str(into)], stdin=archive.stdout, stderr=subprocess.DEVNULL
    )
    if archive.stdout is not None:
        archive.stdout.close()
    return archive.wait() == 0 and untar.returncode == 0


def extract_blobs(
    git_dir: Path, commit: str, into: Path, keep: Callable[[str], bool] | None = None
) -> list[str]:
    """Write every file of ``commit`` that the git dir holds into ``into`` (symlinks as
    links, executables executable; submodules skipped; with ``keep``, only the paths it
    accepts); return the paths it lacks."""
    git = ["git", "--git-dir", str(git_dir)]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-z", "--full-tree", commit], capture_output=True, check=True
    ).stdout.decode()
    entries = []
    for item in filter(None, listing.split("\0")):
        meta, path = item.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and (keep is None or keep(path)):
            entries.append((mode, sha, path))
    batch = subprocess.Popen(
        [*git, "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert batch.stdin is not None and batch.stdout is not None
    missing = []
    for mode, sha, path in entries:
        batch.stdin.write(f"{sha}\n".encode())
        batch.stdin.flush()
        header = batch.stdout.readline().decode().split()
        if len(header) < 3:  # "<sha> missing"
            missing.append(path)
            continue
        data = batch.stdout.read(int(header[2]))
        batch.stdout.read(1)  # the newline after the object
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.symlink_to(data.decode())
        else:
            target.write_bytes(data)
            if mode == "100755":
                target.chmod(0o755)
    batch.stdin.close()
    batch.wait()
    batch.stdout.close()
    return missing


def setup_env(tree: Path) -> dict[str, str]:
    """What setup commands see: ``$PYTHON`` (this interpreter), ``$CORPUS_SHIMS`` and
    ``$CORPUS_TREE``."""
    return {
        **os.environ,
        "PYTHON": sys.executable,
        "CORPUS_SHIMS": str(SHIMS),
        "CORPUS_TREE": str(tree),
    }


def materialize(
    program: Program, dest: Path, *, mirrors: Path = MIRRORS, cache: Path = CACHE
) -> Path:
    """The repository tree of ``program`` at its commit in ``dest`` (extracted unless
    ``dest`` already holds that commit), with the program's setup run; returns ``dest``."""
    mark = dest / SOURCE_MARK
    want = f"{program.project} {program.commit}\n"
    if not (mark.is_file() and mark.read_text() == want):
        if dest.exists():
            shutil.rmtree(dest)
        part = dest.with_name(dest.name + ".part")
        if part.exists():
            shutil.rmtree(part)
        part.mkdir(parents=True)
        git_dir = git_dir_for(program, mirrors, cache)
        if not _archive(git_dir, program.commit, part):
            shutil.rmtree(part)
            part.mkdir()
            missing = extract_blobs(git_dir, program.commit, part)
            if missing:  # a mirror without its largest files: name what is absent
                (part / MISSING_MARK).write_text("".join(f"{m}\n" for m in missing))
        (part / SOURCE_MARK).write_text(want)
        part.rename(dest)
    if program.setup:
        key = hashlib.sha256("\n".join(program.setup).encode()).hexdigest()[:16]
        done = dest / f".corpus-setup-{key}"
        if not done.exists():
            for command in program.setup:
                subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", command],
                    cwd=dest,
                    env=setup_env(dest),
                    check=True,
                )
            done.write_text("\n".join(program.setup) + "\n")
    return dest
