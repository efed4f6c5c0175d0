"""The spool: rotation, reopen, acks, SIGKILL mid-write, and a full disk."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradwatch.core.spool import (
    SEGMENT_BYTES,
    SpoolCursor,
    SpoolWriter,
    list_segments,
    read_acked,
    read_batch,
    read_spool,
    segment_path,
    write_acked,
)
from gradwatch.core.wire import Array, Kind, Record


def record(i: int) -> Record:
    return Record(
        Kind.STEPS, {"step": i, "note": "x" * (i % 50)}, {"g": Array.from_values("f8", [i, -0.0])}
    )


def write(run: Path, n: int, segment_bytes: int = SEGMENT_BYTES) -> None:
    """``n`` records (steps 0 to n-1) appended by one writer, closed."""
    writer = SpoolWriter(run, segment_bytes=segment_bytes)
    for i in range(n):
        writer.append(record(i))
    writer.close()


def test_append_and_read_across_rotation(tmp_path: Path) -> None:
    writer = SpoolWriter(tmp_path / "run", segment_bytes=2_000)
    seqs = [writer.append(record(i)) for i in range(200)]
    writer.close()
    assert seqs == list(range(1, 201))
    assert len(list_segments(tmp_path / "run")) > 10
    spool = read_spool(tmp_path / "run")
    assert [f.seq for f in spool.frames] == seqs
    assert [f.record.meta["step"] for f in spool.frames] == list(range(200))
    assert (spool.torn_tail_bytes, spool.corrupt_frames) == (0, 0)
    assert [f.seq for f in read_spool(tmp_path / "run", after_seq=150).frames] == seqs[150:]


def test_seq_continues_after_reopen_in_a_new_segment(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write(run, 5)
    second = SpoolWriter(run)
    assert second.last_seq == 5
    assert second.append(record(5)) == 6
    second.close()
    assert list_segments(run) == [0, 1]
    assert [f.seq for f in read_spool(run).frames] == [1, 2, 3, 4, 5, 6]


def test_batches_resume_from_a_cursor(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write(run, 300, segment_bytes=3_000)
    cursor, seen = SpoolCursor(), []
    while (batch := read_batch(run, cursor, max_bytes=1_000, max_frames=7)).frames:
        assert len(batch.frames) <= 7
        seen += [f.seq for f in batch.frames]
        cursor = batch.cursor
    assert seen == list(range(1, 301))


def test_one_frame_larger_than_the_batch_budget_is_still_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    writer = SpoolWriter(run)
    writer.append(Record(Kind.STEPS, {}, {"big": Array.from_values("u1", [7] * 50_000)}))
    writer.close()
    batch = read_batch(run, SpoolCursor(), max_bytes=1_000)
    assert [f.seq for f in batch.frames] == [1]


def test_ack_file(tmp_path: Path) -> None:
    assert read_acked(tmp_path) == 0
    write_acked(tmp_path, 7)
    write_acked(tmp_path, 3)  # never moves backwards
    assert read_acked(tmp_path) == 7
    (tmp_path / "acked").write_text("garbage")
    assert read_acked(tmp_path) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acked"]  # no temp files left


def test_explicit_torn_tail_is_skipped_and_writer_moves_on(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write(run, 10)
    path = segment_path(run, 0)
    frames = read_spool(run).frames
    cut = frames[-1].offset + frames[-1].size // 2
    os.truncate(path, cut)
    spool = read_spool(run)
    assert [f.seq for f in spool.frames] == list(range(1, 10))
    assert spool.torn_tail_bytes == cut - frames[-1].offset
    reopened = SpoolWriter(run)
    assert reopened.append(record(99)) == 10  # continues after the last good seq
    reopened.close()
    spool = read_spool(run)
    assert [f.seq for f in spool.frames] == list(range(1, 11))
    assert spool.torn_tail_bytes == cut - frames[-1].offset  # still reported, in segment 0


CHILD = """
import os
import sys
from pathlib import Path
from gradwatch.core.spool import SpoolWriter
from gradwatch.core.wire import Array, Kind, Record
w = SpoolWriter(Path(sys.argv[1]), segment_bytes=int(sys.argv[2]))
i = 0
while True:
    i += 1
    seq = w.append(Record(Kind.STEPS, {"i": i}, {"x": Array.from_values("f8", [float(i)] * 200)}))
    w.flush()
    assert seq == i
    if i % 100 == 0:  # publish progress atomically: the test reads it after the kill
        with open(sys.argv[3] + ".tmp", "w") as f:
            f.write(str(i))
        os.replace(sys.argv[3] + ".tmp", sys.argv[3])
"""


@pytest.mark.parametrize("attempt", range(3))
def test_sigkill_loses_nothing_that_was_flushed(tmp_path: Path, attempt: int) -> None:
    run, progress = tmp_path / "run", tmp_path / "progress"
    rng = random.Random(attempt)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run), "200000", str(progress)])
    deadline = time.monotonic() + 20
    while not progress.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0.05, 0.4))
    child.send_signal(signal.SIGKILL)
    child.wait()
    flushed = int(progress.read_text())
    spool = read_spool(run)
    seqs = [f.seq for f in spool.frames]
    assert seqs == list(range(1, len(seqs) + 1)), "consecutive, no gaps"
    assert len(seqs) >= flushed > 0
    assert [f.record.meta["i"] for f in spool.frames] == seqs
    assert spool.corrupt_frames == 0


def test_disk_full_never_raises(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    run = tmp_path / "run"
    run.mkdir()
    segment_path(run, 0).symlink_to("/dev/full")
    writer = SpoolWriter(run)
    results = [writer.append(record(i)) for i in range(5)]
    writer.flush(fsync=True)
    writer.close()
    assert results == [0] * 5
    assert writer.dropped == 5
    assert writer.last_seq == 0
    assert writer.error is not None
    assert "No space left on device" in writer.error
