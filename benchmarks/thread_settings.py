"""Thread settings of the benchmarks: torch's default first (what users run), then others.

``--threads default,1,all`` names torch's default intra-op thread count (read at import,
before any script sets it), one thread, and every logical CPU; settings that come to the
same count are run once. A script runs its whole measurement once per setting and
writes one JSON (``{"runs": [...]}``, one result per setting, headline first) and one
Markdown file with a section per setting.

Example::

    counts = thread_settings.parse("default,1,all")          # [2, 1] on a 2-core machine
    runs = [measure() for n in counts if thread_settings.use(n)]
    thread_settings.write(out, runs, markdown)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

#: torch's own choice for this machine, before any benchmark changes it
DEFAULT = torch.get_num_threads()
SPEC_HELP = (
    "comma-separated thread settings, each 'default' (torch's default, "
    f"{DEFAULT} here), 'all' (every logical CPU) or a count; the first is the headline"
)


def parse(spec: str) -> list[int]:
    """Thread counts of ``spec`` in order, each once; ``ValueError`` for a bad item."""
    counts: list[int] = []
    for item in (s.strip() for s in spec.split(",")):
        if item == "default":
            n = DEFAULT
        elif item == "all":
            n = os.cpu_count() or 1
        elif item.isdigit() and int(item) >= 1:
            n = int(item)
        else:
            raise ValueError(f"thread setting {item!r} is not 'default', 'all' or a count ≥ 1")
        if n not in counts:
            counts.append(n)
    return counts


def label(n: int) -> str:
    """``2 (torch's default, all cores)``: a count and what it stands for here."""
    names = [
        name
        for name, hit in (("torch's default", n == DEFAULT), ("all cores", n == os.cpu_count()))
        if hit
    ]
    return f"{n} ({', '.join(names)})" if names else str(n)


def use(n: int) -> bool:
    """Set torch's intra-op threads to ``n`` and announce it; True (for comprehensions)."""
    torch.set_num_threads(n)
    print(f"== torch.set_num_threads({label(n)}) ==", flush=True)
    return True


def write(out: Path, runs: Sequence[dict[str, Any]], markdown: Callable[[Any], str]) -> str:
    """``out`` (JSON of every run) and its ``.md`` (one section per run); the Markdown."""
    for run in runs:
        run["threads_label"] = label(run["machine"]["torch_num_threads"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": list(runs)}, indent=2) + "\n")
    md = "\n".join(markdown(run) for run in runs)
    out.with_suffix(".md").write_text(md)
    return md
