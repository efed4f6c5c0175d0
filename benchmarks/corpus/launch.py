"""Run one corpus program once, with or without ``gradwatch run``, and read what it did.

Both modes run the same command line with the same environment: ``PYTHONPATH`` = the
program's shims, then ``shims/_seed`` (our sitecustomize: seeds, optimizer digest), then
the gradwatch sources; ``OMP_NUM_THREADS=1``. With gradwatch the command is wrapped in
``python -m gradwatch run --data-dir D --`` and the findings are read back with
``python -m gradwatch findings --json --data-dir D``.

The digest compares training, not logging: the sha256 of every optimizer's final parameter
values and of the parameters updated by hand (written by the sitecustomize at exit) plus the
program's stdout with timing-like numbers, clock times and memory addresses masked.

A launch's training steps (`steps_of`): the optimizer steps of its busiest optimizer; for a
program whose optimizers never step, its *hand updates* (backward passes after which
parameters in no optimizer that received a gradient changed value before the next backward
pass), as counted by the sitecustomize.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spec import SHIMS, Program

COLLECTOR = Path(__file__).resolve().parents[2] / "collector"
FINDING_KEYS = ("check", "severity", "step", "message", "source")

# a line that reports speed or time: every number on it is masked
_TIMING_LINE = re.compile(
    r"time|elapsed|sec\b|secs\b|seconds|\bms\b|ms/|/s\b|it/s|s/it|speed|throughput|\beta\b|"
    r"took|duration|fps|\bSPS\b|samples/s|tokens/s|per second|\d(?:\.\d+)?s\b|\d(?:\.\d+)?ms\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
#: a compound duration written as one word (``1s674ms``, ``987ms``, ``2m3s``, ``1D2h``): one
#: token, so a bar that passes a unit boundary at another batch in the other mode compares
_DURATION = re.compile(r"\b(?:\d+(?:\.\d+)?(?:ms|D|h|m|s)){1,5}\b")
_PADDED_MASK = re.compile(r" {2,}#")
_CLOCK = re.compile(r"\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


#: a row of a table: numbers only (or a rule of dashes), as a header's columns are filled
_TABLE_ROW = re.compile(r"\s*(?:(?:[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-+)\s*)+")


def _time_columns(line: str) -> list[tuple[int, int]]:
    """Where a table's header line (words only, no number) names a time column
    (``time``, ``sec``): the character spans of those names; else none."""
    if _NUMBER.search(line):
        return []
    return [
        (m.start(), m.end()) for m in re.finditer(r"\S+", line) if _TIMING_LINE.search(m.group())
    ]


def _mask_columns(line: str, columns: list[tuple[int, int]]) -> str:
    """``line`` with every number that overlaps one of ``columns`` masked."""

    def mask(m: re.Match[str]) -> str:
        under = any(m.start() < end and start < m.end() for start, end in columns)
        return "#" if under else m.group()

    return _NUMBER.sub(mask, line)


def normalise_stdout(text: str) -> str:
    """The program's stdout with what differs between two identical trainings masked:
    every number on a line about time or speed, clock times, dates, memory addresses,
    trailing blanks and progress-bar carriage returns; and in the rows of a table whose
    header names a time column (``ep  lr  loss  time``, then rows of numbers only), the
    numbers under that column."""
    lines = []
    columns: list[tuple[int, int]] = []  # time columns of the table being read
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rsplit("\r", 1)[-1].rstrip()
        line = _ADDRESS.sub("0x#", _CLOCK.sub("#:#", _DATE.sub("#-#-#", line)))
        if _TIMING_LINE.search(line):
            columns = _time_columns(line) or columns
            line = _NUMBER.sub("#", _DURATION.sub("#t", line))
            # and the padding of a fixed-width field before it (``ms/batch {:5.2f}``
            # prints `` 9.12`` or ``12.34``): one blank however wide the number was
            line = _PADDED_MASK.sub(" #", line)
        elif columns and line and _TABLE_ROW.fullmatch(line):
            line = _mask_columns(line, columns)
        else:
            columns = []
        lines.append(line)
    return "\n".join(lines).strip("\n")


def combine_digest(params: dict[str, Any] | None, stdout: str) -> str:
    """One sha256 of the final parameters (the sitecustomize's record) and normalised stdout."""
    h = hashlib.sha256()
    h.update(json.dumps(params, sort_keys=True).encode())
    h.update(b"\0")
    h.update(normalise_stdout(stdout).encode())
    return h.hexdigest()


@dataclass
class Launch:
    """One run of one program."""

    returncode: int | None  # None: it ran past the program's timeout
    stdout: str
    stderr: str
    seconds: float
    digest: str  # parameters + normalised stdout
    steps: int | None  # training steps (see `steps_of`); None: unknown
    findings: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] | None = None  # the sitecustomize's record (None: not written)
    command: list[str] = field(default_factory=list)
    steps_kind: str | None = None  # "optimizer" or "hand" (see `steps_of`)
    backward: int | None = None  # backward passes

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def steps_of(params: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """(training steps, their kind) from the sitecustomize's record: the most optimizer steps
    of any one optimizer ("optimizer"), or where no optimizer stepped the hand updates
    ("hand"); (None, None) where nothing was recorded."""
    if not params:
        return None, None
    optimizer = max(params.get("steps") or [], default=0)
    hand = int(params.get("hand_updates") or 0)
    if optimizer == 0 and hand > 0:
        return hand, "hand"
    return optimizer, "optimizer"


def environment(program: Program, *, seed: int, digest_file: Path) -> dict[str, str]:
    """The environment of a launch, the same with and without gradwatch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADWATCH")}
    path = [str(SHIMS / s) for s in program.shims]
    path += [str(SHIMS / "_seed"), str(COLLECTOR)]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(path),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONHASHSEED": str(seed),
            "GW_CORPUS_SEED": str(seed),
            "GW_CORPUS_DIGEST": str(digest_file),
            "CUDA_VISIBLE_DEVICES": "",
            "WANDB_MODE": "disabled",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "MPLBACKEND": "Agg",
        }
    )
    env.update(dict(program.env))
    return env


def read_findings(data_dir: Path) -> list[dict[str, Any]]:
    """The findings of every run of the latest job in ``data_dir``, through the CLI."""
    cmd = [sys.executable, "-m", "gradwatch", "findings", "--json", "--data-dir", str(data_dir)]
    env = {**os.environ, "PYTHONPATH": str(COLLECTOR)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode == 2:  # no run: gradwatch never attached
        return []
    try:
        found = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        msg = f"`gradwatch findings --json` printed no JSON: {out.stderr[-300:]}"
        return [{"check": "<runner>", "severity": "error", "step": None, "message": msg}]
    return [{k: f.get(k) for k in FINDING_KEYS} for f in found]


def read_run_findings(data_dir: Path, run_dir: Path) -> list[dict[str, Any]]:
    """Every finding of the run in ``run_dir`` (derived ones included: the structure checks
    and its replicate group's invariants), through ``gradwatch findings --json RUN``."""
    cmd = [sys.executable, "-m", "gradwatch", "findings", "--json", "--data-dir", str(data_dir)]
    env = {**os.environ, "PYTHONPATH": str(COLLECTOR)}
    out = subprocess.run([*cmd, str(run_dir)], capture_output=True, text=True, env=env)
    try:
        found = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        msg = f"`gradwatch findings --json` printed no JSON: {out.stderr[-300:]}"
        return [{"check": "<runner>", "severity": "error", "step": None, "message": msg}]
    keys = (*FINDING_KEYS, "details", "run")
    return [{k: f.get(k) for k in keys} for f in found]


def launch(
    program: Program,
    tree: Path,
    *,
    seed: int,
    gradwatch: bool,
    data_dir: Path,
    extra_run_args: Sequence[str] = (),
) -> Launch:
    """Run ``program`` (materialised in ``tree``) once; with ``gradwatch`` under
    ``gradwatch run --data-dir data_dir extra_run_args``."""
    cwd = tree / program.workdir
    script = os.path.relpath(tree / program.program, cwd)
    command = [sys.executable, script, *program.args]
    if gradwatch:
        run = [sys.executable, "-m", "gradwatch", "run", "--data-dir", str(data_dir)]
        run += ["--project", "corpus", "--name", program.name, *extra_run_args]
        command = [*run, "--", *command]
    with tempfile.TemporaryDirectory(prefix="gw-corpus-") as tmp:
        digest_file = Path(tmp) / "digest.json"
        env = environment(program, seed=seed, digest_file=digest_file)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                command,
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=program.timeout,
                stdin=subprocess.DEVNULL,
            )
            code: int | None = proc.returncode
            stdout, stderr = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = None
            stdout = _text(exc.stdout)
            stderr = _text(exc.stderr) + f"\n<timed out after {program.timeout:.0f} s>"
        seconds = time.perf_counter() - t0
        params: dict[str, Any] | None = None
        if digest_file.is_file():
            params = json.loads(digest_file.read_text())
    steps, kind = steps_of(params)
    findings = read_findings(data_dir) if gradwatch else []
    return Launch(
        returncode=code,
        stdout=stdout,
        stderr=stderr,
        seconds=seconds,
        digest=combine_digest(params, stdout),
        steps=steps,
        findings=findings,
        params=params,
        command=command,
        steps_kind=kind,
        backward=params.get("backward") if params else None,
    )


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
