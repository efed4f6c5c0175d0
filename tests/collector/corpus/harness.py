"""Run one corpus case — a small, real training script — under ``gradwatch run`` in a child
process with its own data directory, and read back every finding of every run it made.

A case declares what gradwatch must say in comment lines at its top:

- ``# expect: CHECK at step N`` — a warning or error finding of CHECK whose step is N
  (``at steps N-M`` accepts any step in that range; omit ``at …`` to accept any step);
  ``role cause`` / ``role consequence`` after it also requires that incident role, and
  ``kind K`` the root-cause kind the finding stands for (``gradwatch.core.incidents``).
- ``# expect: quiet`` — the script is correct: no warning or error finding at all.
- ``# run-args: FLAGS`` — flags for ``gradwatch run`` (e.g. ``--accumulation-steps 4``).
- ``# timeout: SECONDS`` — how long the script may take (default 180).
- ``# launch: torchrun N`` — run the script as a DDP job of N processes on this machine
  (``gradwatch run -- python -m torch.distributed.run --standalone --nproc-per-node N
  CASE``, as users launch one); its findings are those of every rank's run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradwatch.core.incidents import kind_of

CASES = Path(__file__).parent / "cases"
LOUD = ("warning", "error")
_EXPECT = re.compile(
    r"^(?P<check>[a-z][a-z0-9-]*)"
    r"(?:\s+at\s+steps?\s+(?P<lo>\d+)(?:-(?P<hi>\d+))?)?"
    r"(?:\s+role\s+(?P<role>cause|consequence))?"
    r"(?:\s+kind\s+(?P<kind>[a-z][a-z0-9-]*))?\s*$"
)


@dataclass(frozen=True)
class Expect:
    check: str
    lo: int | None = None
    hi: int | None = None
    role: str | None = None
    kind: str | None = None

    def matches(self, finding: dict[str, Any]) -> bool:
        if finding.get("check") != self.check or finding.get("severity") not in LOUD:
            return False
        step = finding.get("step")
        if self.lo is not None and not (
            isinstance(step, int) and self.lo <= step <= (self.hi or self.lo)
        ):
            return False
        if self.kind is not None and kind_of(finding) != self.kind:
            return False
        return self.role is None or finding.get("role") == self.role


@dataclass
class Case:
    path: Path
    quiet: bool = False
    expects: list[Expect] = field(default_factory=list)
    run_args: list[str] = field(default_factory=list)
    timeout: float = 180.0
    #: the launcher in front of the script (``python -m torch.distributed.run …``), or none
    launcher: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem


def parse(path: Path) -> Case:
    """The expectations written at the top of a case script."""
    case = Case(path)
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line.lstrip("# ").partition(":")
        value = value.strip()
        if key == "expect" and value == "quiet":
            case.quiet = True
        elif key == "expect":
            m = _EXPECT.match(value)
            if m is None:
                raise ValueError(f"{path.name}: cannot read expectation {value!r}")
            lo, hi = m["lo"], m["hi"]
            case.expects.append(
                Expect(
                    m["check"],
                    int(lo) if lo else None,
                    int(hi) if hi else None,
                    m["role"],
                    m["kind"],
                )
            )
        elif key == "run-args":
            case.run_args = shlex.split(value)
        elif key == "timeout":
            case.timeout = float(value)
        elif key == "launch":
            name, _, procs = value.partition(" ")
            if name != "torchrun" or not procs.strip().isdigit():
                raise ValueError(f"{path.name}: cannot read launcher {value!r}")
            case.launcher = [
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                procs.strip(),
            ]
    if case.quiet == bool(case.expects):
        raise ValueError(f"{path.name}: declare either '# expect: quiet' or '# expect: CHECK …'")
    return case


def all_cases() -> list[Path]:
    """The case scripts (``_setup.py``, the helpers they share, is not one)."""
    return sorted(p for p in CASES.glob("*.py") if not p.name.startswith("_"))


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    findings: list[dict[str, Any]]

    def loud(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f.get("severity") in LOUD]

    def describe(self) -> str:
        rows = [
            f"{f.get('severity')} {f.get('check')} step={f.get('step')} {f.get('message')}"
            for f in self.findings
        ]
        return "\n".join(rows) + f"\n--- stderr tail ---\n{self.stderr[-3000:]}"


def run_case(case: Case, data_dir: Path, threads: int | None = None) -> Outcome:
    """``gradwatch run [run-args] -- python CASE`` then ``gradwatch findings --json`` of
    every run the invocation made, all in child processes (as a user runs them);
    ``threads`` pins torch's intra-op threads of the children (``OMP_NUM_THREADS``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADWATCH_")}
    env["GRADWATCH_DIR"] = str(data_dir)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [
        sys.executable,
        "-m",
        "gradwatch",
        "run",
        *case.run_args,
        "--",
        sys.executable,
        *case.launcher,
        str(case.path),
    ]
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=case.timeout, cwd=case.path.parent
    )
    findings: list[dict[str, Any]] = []
    runs = data_dir / "runs"
    for run_dir in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []:
        out = subprocess.run(
            [sys.executable, "-m", "gradwatch", "findings", str(run_dir), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.stdout.strip():
            findings += json.loads(out.stdout)
    return Outcome(proc.returncode, proc.stdout, proc.stderr, findings)
