"""A crash-safe, append-only spool of frames, one folder per run.

Layout of ``<data dir>/runs/<run id>/``::

    spool-000000.gws, spool-000001.gws, ...   frames (see gradwatch.core.wire), rotated at
                                              ``segment_bytes``; never rewritten
    acked                                     the highest seq the server acknowledged

Why it survives crashes: every frame goes to the file with one unbuffered ``os.write``, so
it sits in the OS page cache as soon as ``append`` returns and survives the process being
SIGKILLed (``flush(fsync=True)`` also survives power loss). A writer killed mid-write leaves
a torn tail that readers detect by length and CRC. A reopened writer continues the seq after
the last good frame but starts a new segment, so it never appends after a torn tail.
Disk errors (ENOSPC, EIO, ...) never raise from ``append``: the record is dropped, counted
in ``dropped`` and the first error text is kept in ``error``.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradwatch.core.wire import (
    HEADER_SIZE,
    Frame,
    Kind,
    Record,
    encode_frame,
    peek_frame_size,
    scan_frames,
)

SEGMENT_BYTES = 8 << 20
ACK_FILE = "acked"
_SEGMENT_RE = re.compile(r"^spool-(\d{6,})\.gws$")


def segment_path(run_dir: Path, index: int) -> Path:
    """The path of segment number ``index``."""
    return run_dir / f"spool-{index:06d}.gws"


def list_segments(run_dir: Path) -> list[int]:
    """Indices of the segments present in ``run_dir``, ascending."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = (_SEGMENT_RE.match(name) for name in names)
    return sorted(int(m.group(1)) for m in found if m)


def _read_at(path: Path, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``offset`` of a regular file (b"" for anything else)."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                return b""
            f.seek(offset)
            return f.read(max(0, min(size, info.st_size - offset)))
    except OSError:
        return b""


class SpoolWriter:
    """Appends records to a run's spool; see the module docstring for the guarantees.

    Example::

        writer = SpoolWriter(run_dir)
        seq = writer.append(Record(Kind.HEARTBEAT, {}))   # 1, or 0 if the disk failed
        writer.close()
    """

    def __init__(self, run_dir: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.run_dir = Path(run_dir)
        self.segment_bytes = segment_bytes
        self.dropped = 0
        self.error: str | None = None
        self.last_seq = 0
        self._fd: int | None = None
        self._index = 0
        self._size = 0
        self._reuse_last = False
        try:
            self._recover()
        except OSError as e:
            self._note(e)

    def _recover(self) -> None:
        """Find the last good seq and choose the segment to write next."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        segments = list_segments(self.run_dir)
        for index in reversed(segments):
            path = segment_path(self.run_dir, index)
            frames = scan_frames(_read_at(path, 0, 1 << 62)).frames
            if frames:
                self.last_seq = max(f.seq for f in frames)
                break
        if not segments:
            return
        last = segment_path(self.run_dir, segments[-1])
        self._reuse_last = os.path.getsize(last) == 0
        self._index = segments[-1] if self._reuse_last else segments[-1] + 1

    def append(self, record: Record) -> int:
        """Write ``record`` as the next frame and return its seq, or 0 if it was dropped.

        Raises WireError only for a record that cannot be encoded (a programming error);
        disk errors are counted instead.
        """
        frame = encode_frame(self.last_seq + 1, record)
        try:
            self._ensure_room(len(frame))
            self._write_all(frame)
        except OSError as e:
            self.dropped += 1
            self._note(e)
            return 0
        self.last_seq += 1
        self._size += len(frame)
        return self.last_seq

    def _ensure_room(self, nbytes: int) -> None:
        if self._fd is not None and self._size > 0 and self._size + nbytes > self.segment_bytes:
            self._close_fd()
            self._index += 1
        if self._fd is None:
            self._open_segment()

    def _open_segment(self) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        if not self._reuse_last:
            flags |= os.O_EXCL  # never clobber a segment written by another process
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(segment_path(self.run_dir, self._index), flags, 0o644)
        self._reuse_last = False
        self._size = 0

    def _write_all(self, frame: bytes) -> None:
        assert self._fd is not None
        view = memoryview(frame)
        written = 0
        try:
            while written < len(frame):
                written += os.write(self._fd, view[written:])
        except OSError:
            if written:
                self._undo_partial()
            raise

    def _undo_partial(self) -> None:
        """Cut a partial frame off; if that fails, move on to a fresh segment."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._close_fd()
            self._index += 1

    def _note(self, error: OSError) -> None:
        if self.error is None:
            self.error = f"cannot write the spool in {self.run_dir}: {error}"

    def flush(self, fsync: bool = False) -> None:
        """Frames are in the page cache already; ``fsync=True`` also forces them to disk."""
        if self._fd is not None and fsync:
            try:
                os.fsync(self._fd)
            except OSError as e:
                self._note(e)

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError as e:
                self._note(e)

    def close(self) -> None:
        """Close the current segment; idempotent."""
        self._close_fd()


# --- reading --------------------------------------------------------------------------


@dataclass(frozen=True)
class SpoolCursor:
    """A read position: segment index and byte offset inside it."""

    segment: int = 0
    offset: int = 0


@dataclass
class SpoolRead:
    """Frames read from a spool, with damage totals and where reading stopped."""

    frames: list[Frame] = field(default_factory=list)
    torn_tail_bytes: int = 0
    corrupt_frames: int = 0
    cursor: SpoolCursor = field(default_factory=SpoolCursor)
    limited: bool = False  # reading stopped at max_bytes / max_frames

    @property
    def last_seq(self) -> int:
        """The highest seq read (0 if none)."""
        return max((f.seq for f in self.frames), default=0)


def read_spool(run_dir: Path, after_seq: int = 0) -> SpoolRead:
    """Every good frame with ``seq > after_seq``, across all segments in order."""
    return read_batch(Path(run_dir), SpoolCursor(), after_seq=after_seq, max_bytes=1 << 62)


def read_batch(
    run_dir: Path,
    cursor: SpoolCursor,
    *,
    after_seq: int = 0,
    max_bytes: int = 1 << 20,
    max_frames: int | None = None,
) -> SpoolRead:
    """Read frames from ``cursor`` on, stopping near ``max_bytes`` or at ``max_frames``.

    At least one frame is returned when one is available, even if it is larger than
    ``max_bytes``. Damage is only reported for sealed segments (a later one exists) and at
    the end of the last segment; the returned cursor points after the last frame consumed.
    """
    out = SpoolRead(cursor=cursor)
    segments = [i for i in list_segments(run_dir) if i >= cursor.segment]
    for index in segments:
        offset = cursor.offset if index == cursor.segment else 0
        sealed = index != segments[-1]
        out.limited = _read_segment(
            run_dir, index, offset, sealed, out, after_seq, max_bytes, max_frames
        )
        if out.limited:
            break
    return out


def _read_segment(
    run_dir: Path,
    index: int,
    offset: int,
    sealed: bool,
    out: SpoolRead,
    after_seq: int,
    max_bytes: int,
    max_frames: int | None,
) -> bool:
    """Read one segment into ``out`` from ``offset``; True when a limit stopped the read."""
    path = segment_path(run_dir, index)
    taken = sum(f.size for f in out.frames)
    while True:
        want = max(max_bytes - taken, HEADER_SIZE)
        chunk = _read_at(path, offset, want)
        need = peek_frame_size(chunk)
        if need is not None and need > len(chunk):
            want = need  # a single frame larger than the remaining budget
            chunk = _read_at(path, offset, want)
        scan = scan_frames(chunk)
        for frame in scan.frames:
            if out.frames and (taken + frame.size > max_bytes or _full(out, max_frames)):
                return True
            out.cursor = SpoolCursor(index, offset + frame.offset + frame.size)
            if frame.seq > after_seq:
                out.frames.append(frame)
                taken += frame.size
        consumed = len(chunk) - scan.torn_tail_bytes
        offset += consumed
        out.cursor = SpoolCursor(index, offset)
        out.corrupt_frames += scan.corrupt_frames
        if len(chunk) >= want and consumed > 0:
            continue  # more of this segment to read
        out.torn_tail_bytes += scan.torn_tail_bytes
        if sealed:
            out.cursor = SpoolCursor(index + 1, 0)
        return False


def _full(out: SpoolRead, max_frames: int | None) -> bool:
    return max_frames is not None and len(out.frames) >= max_frames


# --- acknowledgements -----------------------------------------------------------------

_ack_lock = threading.Lock()


def read_acked(run_dir: Path) -> int:
    """The highest seq the server acknowledged for this run (0 if none or unreadable)."""
    try:
        value = int((Path(run_dir) / ACK_FILE).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return 0
    return max(value, 0)


def write_acked(run_dir: Path, seq: int) -> None:
    """Record ``seq`` as acknowledged (atomic write + rename; never moves backwards)."""
    run_dir = Path(run_dir)
    with _ack_lock:
        if seq <= read_acked(run_dir):
            return
        tmp = run_dir / f".{ACK_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(f"{seq}\n", encoding="ascii")
        os.replace(tmp, run_dir / ACK_FILE)


def read_start(run_dir: Path) -> dict[str, Any]:
    """The RUN_START meta of the run in ``run_dir`` from its first frame only (``{}`` when
    that frame is missing, damaged or of another kind)."""
    read = read_batch(run_dir, SpoolCursor(), max_frames=1)
    if read.frames and read.frames[0].record.kind == Kind.RUN_START:
        meta: dict[str, Any] = read.frames[0].record.meta
        return meta
    return {}
