"""The Markdown report of `real_projects.py` (the JSON beside it holds every finding in full)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

PACKAGES = ("torch", "transformers", "lightning", "numpy")


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _alarms(run: dict[str, Any], limit: int = 6) -> str:
    """`check@step` of the warning/error findings, grouped by check: `exploding-grad@57,88 (12)`."""
    steps: dict[str, list[str]] = {}
    for f in run["alarms"]:
        steps.setdefault(f["check"], []).append("?" if f["step"] is None else str(f["step"]))
    parts = []
    for check, at in steps.items():
        shown = ",".join(at[:limit]) + ("…" if len(at) > limit else "")
        parts.append(f"`{check}`@{shown}" + (f" ({len(at)})" if len(at) > 1 else ""))
    return "; ".join(parts) or "—"


def _row(run: dict[str, Any]) -> str:
    c = run["runtime_counts"]
    lint = ", ".join(f"`{x}`" for x in run["lint_alarms"]) or "—"
    cells = [
        run["project"], run["config"], run["seed"], str(run["steps"]),
        str(run.get("steps_counted", "—")), run["bug"] or "clean",
        str(run["exit"]), _wall(run), f"{c['error']}/{c['warning']}", _alarms(run), lint,
        f"**{run['verdict']}**",
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _wall(run: dict[str, Any]) -> str:
    """Wall seconds, with the thread setting when the run had one (`63 (1 thr)`)."""
    threads = run.get("threads")
    return f"{run['wall_s']:.0f}" + (f" ({threads} thr)" if threads else "")


def _bug_line(run: dict[str, Any]) -> str:
    hit = run.get("caught_by")
    said = f"`{hit['check']}` at step {hit['step']}: {hit['message']}" if hit else "nothing"
    expect = " or ".join(f"`{x}`" for x in run["expect"])
    where = (
        f"- **{run['project']} / {run['bug']}** — expected {expect} at step {run['expect_step']}"
    )
    return f"{where}; {run['verdict']}: {said}"


def _machine(meta: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """The machine and its load (wall seconds are only comparable at a similar load)."""
    loads = [r["load_1min"] for r in runs if isinstance(r.get("load_1min"), int | float)]
    if not meta.get("machine") and not loads:
        return []
    text = f"Machine: {meta.get('machine', 'not recorded')}"
    if loads:
        text += f"; load average (1 min) as the runs ended: {min(loads):g}–{max(loads):g}"
    return [text + ".", ""]


def markdown(
    meta: dict[str, Any], runs: list[dict[str, Any]], missing: tuple[str, ...] = ()
) -> str:
    clean = [r for r in runs if r["bug"] is None]
    bugs = [r for r in runs if r["bug"] is not None]
    quiet = sum(r["verdict"] == "quiet" for r in clean)
    caught = sum(r["verdict"] == "caught" for r in bugs)
    commits = ", ".join(f"{k} `{v[:12]}`" for k, v in meta["commits"].items())
    pkgs = ", ".join(f"{k} {v}" for k, v in meta["packages"].items())
    lines = [
        "# gradwatch on real projects",
        "",
        f"Command: `{meta['command']}` (CPU). Commits: {commits}. Python {meta['python']}, {pkgs}.",
        "",
        *_machine(meta, runs),
        f"**Clean runs quiet (no runtime warning/error): {quiet} of {len(clean)}. "
        f"Injected bugs caught by the expected check at the right step: {caught} of {len(bugs)}.**",
        "",
        "Columns: updates = optimizer updates the script made (its step count, or read from its"
        " output); counted = steps gradwatch recorded (`gradwatch runs --json`);"
        " s = wall seconds of the run under `gradwatch run` (with OMP_NUM_THREADS"
        " when set); E/W = runtime error/warning findings; alarms = their `check@step` (count);"
        " lint = the script's `gradwatch lint` warnings/errors stored with the run."
        " Configs, injections and expected checks: `benchmarks/real_projects_cases.py`;"
        " every finding in full: `real_projects.json`.",
        "",
        "| project | config | seed | updates | counted | bug | exit | s | E/W | alarms | lint |"
        " verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in runs),
        "",
        "## Injected bugs: what gradwatch said first",
        "",
        *(_bug_line(r) for r in bugs),
        "",
    ]
    if missing:
        lines += [
            f"Not run in this invocation ({len(missing)} cases; `--resume` runs them): "
            + ", ".join(f"`{m}`" for m in missing)
            + ".",
            "",
        ]
    return "\n".join(lines)
