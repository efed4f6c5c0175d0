"""``gradwatch serve`` on a database it cannot use: a damaged, foreign, locked or read-only
SQLite file, an unreachable PostgreSQL. The real command in a subprocess: one line on
stderr naming the file or URL, the cause and what to do; a non-zero exit; the file and its
folder unchanged (``gradwatch_server.startup``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gradwatch_server.db import make_engine
from gradwatch_server.migrate import migrate
from gradwatch_server.startup import LOCK_WAIT_S
from tests.server.conftest import PG_ADMIN

ROOT = Path(__file__).resolve().parents[2]


def serve(
    db: str, tmp_path: Path, *, prefix: tuple[str, ...] = (), args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("collector", "server", "dashboard")),
        "GRADWATCH_DIR": str(tmp_path / "data"),
    }
    env.pop("GRADWATCH_DB", None)
    command = [
        *prefix,
        sys.executable,
        "-m",
        "gradwatch",
        "serve",
        "--db",
        db,
        "--port",
        str(_free_port()),
        *args,
    ]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _state(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` and its SHA-256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def gradwatch_db(path: Path) -> Path:
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    return path


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0, done.stderr
    assert len(lines) == 1, done.stderr  # one line, no traceback
    line = lines[0]
    assert line.startswith("gradwatch serve: "), line
    for word in words:
        assert word in line, (word, line)
    return line


def damaged_header(folder: Path) -> Path:
    path = gradwatch_db(folder / "gradwatch.db")
    with path.open("r+b") as f:
        f.write(b"\x00" * 100)  # the 100-byte header
    return path


def damaged_pages(folder: Path) -> Path:
    path = gradwatch_db(folder / "gradwatch.db")
    with path.open("r+b") as f:  # header intact, the schema page overwritten
        f.seek(100)
        f.write(os.urandom(4000))
    return path


def text_file(folder: Path) -> Path:
    path = folder / "notes.db"
    path.write_text("these are my notes, not a database\n")
    return path


def other_app(folder: Path) -> Path:
    path = folder / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    return path


CASES = {
    "damaged-header": (damaged_header, ("not a SQLite database", "backup", "move it away")),
    "damaged-pages": (damaged_pages, ("damaged", "backup")),
    "text-file": (text_file, ("not a SQLite database", "another kind of file")),
    "other-app": (other_app, ("another application", "users", "--db")),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_an_unusable_file_is_named_and_left_as_it_is(case: str, tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    make, words = CASES[case]
    path = make(folder)
    before = _state(folder)
    line = _refused(serve(f"sqlite:///{path}", tmp_path), str(path), *words)
    assert _state(folder) == before, line
    if case != "damaged-header":
        return
    # the token commands of `serve` say the same
    for args in (("--create-token", "p"), ("--list-tokens",)):
        again = _refused(serve(f"sqlite:///{path}", tmp_path, args=args), str(path), *words)
        assert again == line
    assert _state(folder) == before


@contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """Another process's write transaction on ``path``, held for the block."""
    code = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == "locked"
            yield
        finally:
            holder.stdin.close()
            holder.wait(30)


@pytest.mark.slow
def test_a_locked_file(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    path = gradwatch_db(folder / "gradwatch.db")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with write_locked(path):
        line = _refused(
            serve(f"sqlite:///{path}", tmp_path), str(path), "locked by another process"
        )
    assert f"{LOCK_WAIT_S:g} s" in line
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def _without_root_powers() -> tuple[str, ...]:
    """A prefix that makes the command obey file permissions when the tests run as root."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root: setpriv (util-linux) is needed to test a read-only file"
    return (setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner")


@pytest.mark.slow
def test_a_read_only_file(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    path = gradwatch_db(folder / "gradwatch.db")
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        before = _state(folder)
        done = serve(f"sqlite:///{path}", tmp_path, prefix=_without_root_powers())
        _refused(done, str(path), "write access")
        assert _state(folder) == before
    finally:
        folder.chmod(0o755)


def _refusing_port() -> int:
    """A loopback port nothing listens on."""
    return _free_port()


@pytest.mark.slow
def test_an_unreachable_postgresql(tmp_path: Path) -> None:
    url = f"postgresql://gradwatch:secret@127.0.0.1:{_refusing_port()}/gradwatch"
    line = _refused(
        serve(url, tmp_path),
        "PostgreSQL",
        f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}",
        "refused",
        "start PostgreSQL",
    )
    assert "secret" not in line and "***" in line


@pytest.mark.slow
def test_a_missing_postgresql_database(tmp_path: Path) -> None:
    from sqlalchemy.engine import make_url

    url = (
        make_url(PG_ADMIN)
        .set(database="gradwatch_no_such_db")
        .render_as_string(hide_password=False)
    )
    _refused(serve(url, tmp_path), "gradwatch_no_such_db", "does not exist", "createdb")


@contextmanager
def _full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs filled to its last few KiB (needs the power to mount; else skip)."""
    where = tmp_path / "small-disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root powers here")
    try:
        with (where / "fill").open("wb") as f:
            f.write(b"\0" * 60 * 1024)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.slow
def test_a_full_disk(tmp_path: Path) -> None:
    with _full_disk(tmp_path) as disk:
        before = _state(disk)
        path = disk / "runs" / "gradwatch.db"
        _refused(serve(f"sqlite:///{path}", tmp_path), str(path), "full", "free disk space")
        assert _state(disk) == before  # no empty database file or folder left behind


#: runs a command with files limited to 20,000 bytes (writes past it fail, as on a full disk)
_FILE_SIZE_LIMIT = (
    "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.slow
def test_a_write_that_fails_while_the_database_is_made(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    path = folder / "new" / "gradwatch.db"
    done = serve(f"sqlite:///{path}", tmp_path, prefix=(sys.executable, "-c", _FILE_SIZE_LIMIT))
    _refused(done, str(path), "I/O", "check the disk")
    assert list(folder.iterdir()) == []  # the file and the folder made for it are gone
