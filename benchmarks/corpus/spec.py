"""What one corpus program is: a public training script, pinned to a commit, run unmodified.

A `Program` names the repository (``owner/name``), the commit, the script inside the tree
and the command-line arguments that make it small (tiny sizes, the CPU, a step cap). Shims
(our own small stand-ins for datasets and packages that cannot be installed, folders under
``benchmarks/corpus/shims/``) go first on ``PYTHONPATH``; ``setup`` commands run in the
tree before the run (e.g. to write a synthetic dataset). Programs are listed in
``PROGRAMS`` lists of the ``programs_*.py`` modules next to this file; `all_programs`
collects them.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIMS = HERE / "shims"

TAGS = frozenset(
    (
        "cnn", "resnet-bn", "gan-dcgan", "wgan-gp", "vae", "diffusion", "ssl-momentum",
        "rl-pg", "rl-ac", "rl-ppo", "rl-dqn", "rnn-lm", "transformer-lm", "seq2seq", "moe",
        "finetune-frozen", "lora", "distill", "meta", "gnn", "hf-trainer", "lightning-auto",
        "lightning-manual", "lightning-submodule", "amp", "accumulation", "checkpointing",
        "compile",
    )
)  # fmt: skip
_COMMIT = re.compile(r"[0-9a-f]{40}")
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Program:
    """One unmodified public training program and how to run it small on the CPU."""

    project: str  # "owner/name" on GitHub
    commit: str  # 40 hex digits
    program: str  # the script's path inside the repository, e.g. "dcgan/main.py"
    args: tuple[str, ...] = ()  # its command-line arguments: tiny sizes, cpu, a step cap
    steps: int = 300  # optimizer steps it is expected to make (at least)
    seeds: tuple[int, ...] = (0,)
    shims: tuple[str, ...] = ()  # folders under shims/, first on PYTHONPATH
    setup: tuple[str, ...] = ()  # shell commands run in the tree root before the run
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""  # working directory inside the tree; default the script's folder
    tags: tuple[str, ...] = ()  # categories covered, from TAGS
    timeout: float = 600
    variant: str = ""  # tells apart two entries of one script (e.g. "amp"), else ""

    def __post_init__(self) -> None:
        if not _PROJECT.fullmatch(self.project):
            raise ValueError(f"project {self.project!r} is not owner/name")
        if not _COMMIT.fullmatch(self.commit):
            raise ValueError(f"{self.project}: commit {self.commit!r} is not 40 hex digits")
        unknown = sorted(set(self.tags) - TAGS)
        if unknown:
            raise ValueError(f"{self.name}: unknown tags {unknown}")
        missing = [s for s in self.shims if not (SHIMS / s).is_dir()]
        if missing:
            raise ValueError(f"{self.name}: no shim folder {missing} under {SHIMS}")

    @property
    def name(self) -> str:
        """``owner/name:path/to/script.py``, then `` [variant]`` when one is set."""
        base = f"{self.project}:{self.program}"
        return f"{base} [{self.variant}]" if self.variant else base

    @property
    def workdir(self) -> str:
        """The working directory inside the tree: `cwd`, else the script's folder."""
        if self.cwd:
            return self.cwd
        parent = str(Path(self.program).parent)
        return "" if parent == "." else parent


def load_module(path: Path) -> object:
    """Import one ``programs_*.py`` file by path (the folder is not a package; the files
    import this module as ``spec``, so this folder goes on ``sys.path``)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    name = f"_gw_corpus_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def all_programs(folder: Path = HERE) -> list[Program]:
    """Every `Program` of the ``PROGRAMS`` lists in ``folder/programs_*.py``, by file name;
    two programs with one name (same project and script, no `variant`) are an error."""
    found: list[Program] = []
    for path in sorted(folder.glob("programs_*.py")):
        programs = getattr(load_module(path), "PROGRAMS", None)
        if not isinstance(programs, list):
            raise TypeError(f"{path.name} has no PROGRAMS list")
        for p in programs:
            if not isinstance(p, Program):
                raise TypeError(f"{path.name}: {p!r} is not a Program")
        found.extend(programs)
    seen: set[str] = set()
    for p in found:
        if p.name in seen:
            raise ValueError(f"two programs are named {p.name!r}; give them a variant")
        seen.add(p.name)
    return found
