"""The training process under faults: SIGKILL at random steps, torn tails, a full disk.

After a SIGKILL every record flushed before the last second is in the spool, and
``gradwatch sync`` delivers exactly the spooled frames (a torn tail is skipped, never sent);
a full disk never reaches the training loop: the lost records are counted and reported.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gradwatch.core.local_reader import load_run
from gradwatch.core.spool import list_segments, read_spool, segment_path
from gradwatch.core.wire import Kind, Record, encode_frame
from tests.faults.harness import ServerProcess, Trainer, account

SCRIPT = Path(__file__).parent / "scripts" / "train_loop.py"
FLUSH_BOUND_S = 1.0  # the promise: a killed process loses at most the last second


def start(
    data_dir: Path, steps: int, pause: float, preexec: Callable[[], None] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(data_dir), str(steps), str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )


@pytest.mark.parametrize("kill_after", [5, 40])
def test_sigkilled_training_keeps_every_flushed_step(tmp_path: Path, kill_after: int) -> None:
    proc = start(tmp_path, 10_000, 0.01)
    assert proc.stdout is not None
    run_dir = Path(proc.stdout.readline().split(" ", 1)[1].strip())
    printed: list[tuple[int, float]] = []
    while not printed or printed[-1][0] < kill_after:
        line = proc.stdout.readline()
        if line.startswith("step "):
            _, n, t = line.split()
            printed.append((int(n), float(t)))
    killed_at = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)  # reaps it and closes the pipes
    run = load_run(run_dir)
    got = [row.step for row in run.steps.get(0, [])]
    assert got == list(range(1, len(got) + 1)), "a gap in the recorded steps"
    must_have = (
        max(n for n, t in printed if t <= killed_at - FLUSH_BOUND_S)
        if any(t <= killed_at - FLUSH_BOUND_S for _, t in printed)
        else 0
    )
    assert len(got) >= must_have
    assert run.end is None  # it never closed: the server will call it crashed
    assert run.corrupt_frames == 0


def test_a_torn_tail_is_detected_and_skipped(tmp_path: Path) -> None:
    proc = start(tmp_path, 20, 0.0)
    out, _ = proc.communicate(timeout=120)
    run_dir = Path(out.splitlines()[0].split(" ", 1)[1])
    whole = load_run(run_dir)
    last = segment_path(run_dir, list_segments(run_dir)[-1])
    size = last.stat().st_size
    os.truncate(last, size - 7)  # the process died in the middle of writing its last frame
    torn = load_run(run_dir)
    assert torn.torn_tail_bytes > 0
    assert torn.records == whole.records - 1
    assert [r.step for r in torn.steps[0]] == [r.step for r in whole.steps[0]]
    assert torn.end is None and whole.end is not None


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write(), not a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))


def _full_disk_run(data_dir: Path, preexec: Callable[[], None] | None) -> None:
    proc = start(data_dir, 200, 0.0, preexec)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    stats = json.loads(out.splitlines()[-1].removeprefix("stats "))
    assert stats["dropped_disk"] > 0
    assert stats["written"] > 0
    assert "records could not be written" in err
    run_dir = Path(out.splitlines()[0].split(" ", 1)[1])
    run = load_run(run_dir)
    assert run.corrupt_frames == 0 and run.torn_tail_bytes == 0
    steps = [r.step for r in run.steps.get(0, [])]
    # whole records are written or dropped (never half of one), in order
    assert steps == sorted(set(steps)) and len(steps) < 200


def test_file_size_limit_never_raises_into_training(tmp_path: Path) -> None:
    _full_disk_run(tmp_path, _limit_file_size)


def test_full_tmpfs_never_raises_into_training(tmp_path: Path) -> None:
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.strip()}); the file-size-limit "
            "test covers the same path"
        )
    try:
        _full_disk_run(mount, None)
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def sync(data_dir: Path, server: str) -> str:
    cmd = [sys.executable, "-m", "gradwatch", "sync", "--server", server]
    done = subprocess.run(
        [*cmd, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_killed_at_its_first_step_then_sync_sends_exactly_the_spool(tmp_path: Path) -> None:
    """A training SIGKILLed at its first step, within its writer's first 0.2 s, has
    usually spooled nothing: ``sync`` then sends nothing and the server knows no such run;
    whatever it did spool, the server holds exactly that."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'server' / 'gw.db'}", tmp_path / "server")
    server.start()
    collectors = tmp_path / "collectors"
    try:
        (trainer,) = Trainer.many(1, collectors, 0.005, quiet=False)
        assert trainer.proc.stdout is not None
        while not trainer.proc.stdout.readline().startswith("step 1 "):
            pass
        os.kill(trainer.proc.pid, signal.SIGKILL)
        trainer.proc.communicate(timeout=30)
        sync(collectors, server.url)
        got = account(trainer.run_dir, server.db_url, server.url)
        assert got.frames == len(read_spool(trainer.run_dir).frames)
    finally:
        server.stop()


def test_killed_at_random_steps_then_sync_delivers_every_flushed_record(tmp_path: Path) -> None:
    """Three trainings streaming to a server are SIGKILLed at random steps; ``sync`` then
    completes the server to exactly the spool, also after a torn frame is left at the end."""
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    server = ServerProcess(f"sqlite:///{tmp_path / 'server' / 'gw.db'}", tmp_path / "server")
    server.start()
    collectors = tmp_path / "collectors"
    try:
        trainers = Trainer.many(3, collectors, 0.005, "--server", server.url, quiet=False)
        for trainer in trainers:
            kill_at = rng.randint(1, 200)
            assert trainer.proc.stdout is not None
            while not trainer.proc.stdout.readline().startswith(f"step {kill_at} "):
                pass
            os.kill(trainer.proc.pid, signal.SIGKILL)
            trainer.proc.communicate(timeout=30)
        run_dirs = [t.run_dir for t in trainers]
        sync(collectors, server.url)
        for run_dir in run_dirs:
            account(run_dir, server.db_url, server.url)
        # a write cut short: the first bytes of the next frame at the end of the last segment
        # (of a run that spooled something: one killed within its writer's first 0.2 s
        # has no segment, and the server rightly knows nothing of it)
        torn_dir = [d for d in run_dirs if read_spool(d).frames][-1]
        next_seq = read_spool(torn_dir).frames[-1].seq + 1
        frame = encode_frame(next_seq, Record(Kind.HEARTBEAT, {"t": 1.7e9, "steps": [1]}))
        last = segment_path(torn_dir, list_segments(torn_dir)[-1])
        with last.open("ab") as out:
            out.write(frame[: len(frame) // 2])
        assert read_spool(torn_dir).torn_tail_bytes == len(frame) // 2
        sync(collectors, server.url)
        got = account(torn_dir, server.db_url, server.url)
        assert got.frames == next_seq - 1, seed  # the torn frame was skipped, not sent
    finally:
        server.stop()
