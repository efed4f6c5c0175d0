"""What `real_projects.py` runs: the projects, their configs and the bugs injected into copies.

Each :class:`Case` is one `gradwatch run` of one project's unmodified training entry point
(or of a copy with one bug injected by exact text replacement: a replacement that no longer
matches the project's code is an error, never a silently clean run). The configs are the
ones the projects document for a CPU (nanoGPT's README "baby GPT on a MacBook" flags,
minGPT's adder), shrunk only in model size and step count.
"""

from __future__ import annotations

import dataclasses
import pickle
import sysconfig
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "real_projects_scripts"
STEPS = 400


@dataclasses.dataclass(frozen=True)
class Bug:
    """One injected bug: text replacements in files of the copy and what must catch it."""

    name: str
    patches: tuple[tuple[str, str, str], ...]  # (file, old text, new text)
    expect: tuple[str, ...]  # check ids that name this bug
    step: int  # first optimizer step at which the bug shows
    window: int = 5  # a finding up to this many steps later still counts as on time


@dataclasses.dataclass(frozen=True)
class Case:
    project: str  # nanoGPT | minGPT | hf-trainer | lightning
    config: str  # short name of the config
    cwd: str  # working directory inside the copy
    argv: tuple[str, ...]  # the user's command, after `python`
    seed: str  # the seed the run uses (as the project sets it)
    steps: int
    gw_args: tuple[str, ...] = ()
    bug: Bug | None = None
    quick: bool = False  # part of the --quick subset

    @property
    def label(self) -> str:
        bug = self.bug.name if self.bug else "clean"
        return f"{self.project}/{self.config}/seed={self.seed}/{bug}"


def local_text(limit: int = 1_200_000) -> str:
    """Deterministic local English-and-code text (the stdlib's sources, ASCII only): the
    stand-in for tiny Shakespeare, which nanoGPT's prepare.py downloads."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="ignore").encode("ascii", "ignore").decode()
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    return "".join(parts)[:limit]


def write_char_dataset(dest: Path) -> None:
    """train.bin / val.bin / meta.pkl as nanoGPT's shakespeare_char/prepare.py writes them."""
    dest.mkdir(parents=True, exist_ok=True)
    data = local_text()
    chars = sorted(set(data))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = np.array([stoi[c] for c in data], dtype=np.uint16)
    cut = int(len(ids) * 0.9)
    ids[:cut].tofile(dest / "train.bin")
    ids[cut:].tofile(dest / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    with open(dest / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)


# nanoGPT's README recipe for a CPU ("baby GPT"), at 400 iterations.
NANO_A = (
    "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
    "--eval_iters=20", "--log_interval=10", "--block_size=64", "--batch_size=12",
    "--n_layer=4", "--n_head=4", "--n_embd=128", f"--max_iters={STEPS}",
    f"--lr_decay_iters={STEPS}", "--dropout=0.0",
)  # fmt: skip
# The same with gradient accumulation over 4 micro-batches, dropout and a shorter warm-up.
NANO_ACC = (
    *NANO_A[:7], "--batch_size=4", "--n_layer=2", "--n_head=4", "--n_embd=64",
    f"--max_iters={STEPS}", f"--lr_decay_iters={STEPS}", "--dropout=0.1",
    "--gradient_accumulation_steps=4", "--warmup_iters=50",
)  # fmt: skip
ACC4 = ("--accumulation-steps", "4")

NANO_NO_ZERO = Bug(
    "missing-zero_grad",
    (("train.py", "    optimizer.zero_grad(set_to_none=True)\n", "\n"),),
    ("stale-grad",),
    step=2,
)
NANO_ZERO_IN_MICRO = Bug(
    "zero_grad-inside-micro-step-loop",
    (
        ("train.py", "    optimizer.zero_grad(set_to_none=True)\n", "\n"),
        (
            "train.py",
            "        scaler.scale(loss).backward()\n",
            "        optimizer.zero_grad(set_to_none=True)\n"
            "        scaler.scale(loss).backward()\n",
        ),
    ),
    ("accumulation-wiped",),
    step=1,
)
NANO_ITEM_BREAK = Bug(
    "loss-rebuilt-from-item",
    (
        (
            "train.py",
            "            loss = loss / gradient_accumulation_steps",
            "            loss = torch.tensor(loss.item() / gradient_accumulation_steps)\n"
            "            loss.requires_grad = True",
        ),
    ),
    ("param-no-grad",),
    step=1,
)
MIN_PLAIN_LIST = Bug(
    "blocks-in-plain-list",
    (
        (
            "mingpt/model.py",
            "            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),\n",
            "",
        ),
        (
            "mingpt/model.py",
            "        self.lm_head = nn.Linear(",
            "        self.blocks = [Block(config) for _ in range(config.n_layer)]\n"
            "        self.lm_head = nn.Linear(",
        ),
        ("mingpt/model.py", "for block in self.transformer.h:", "for block in self.blocks:"),
    ),
    ("param-not-in-optimizer", "param-no-grad"),
    step=1,
)
MIN_NO_ZERO = Bug(
    "missing-zero_grad",
    (("mingpt/trainer.py", "            model.zero_grad(set_to_none=True)\n", "\n"),),
    ("stale-grad",),
    step=2,
)
LR_1E3_HF = Bug(
    "lr-x1000",
    (("hf_trainer.py", "LR = 5e-4\n", "LR = 5e-4 * 1e3\n"),),
    ("update-ratio", "loss-diverging", "exploding-grad", "lr-jump", "nonfinite-loss"),
    step=1,
)
LR_1E3_NANO = Bug(
    "lr-x1000",
    (("config/train_shakespeare_char.py", "learning_rate = 1e-3", "learning_rate = 1e-3 * 1e3"),),
    LR_1E3_HF.expect,
    step=1,
)
# The logits detached, then `loss.requires_grad = True` to silence autograd's error (the
# whole loss detached alone makes backward() raise, which needs no monitor).
HF_DETACH_BREAK = Bug(
    "loss-through-detach",
    (
        ("hf_trainer.py", "logits = outputs.logits\n", "logits = outputs.logits.detach()\n"),
        (
            "hf_trainer.py",
            "        return (loss, outputs)",
            "        loss.requires_grad = True\n        return (loss, outputs)",
        ),
    ),
    ("param-no-grad",),
    step=1,
)
PL_SCHED_PER_BATCH = Bug(
    "scheduler-stepped-per-batch",
    (("lightning_module.py", '"interval": "epoch"', '"interval": "step"'),),
    ("lr-collapse",),
    step=40,
    window=80,
)
PL_NAN_BATCH = Bug(
    "nan-in-batch-200",
    (("lightning_module.py", "NAN_AT_BATCH = -1\n", "NAN_AT_BATCH = 200\n"),),
    ("nonfinite-loss", "nonfinite-grad", "nonfinite-param", "nonfinite-input"),
    step=201,
    window=1,
)

MIN_ARGV = ("adder.py", f"--trainer.max_iters={STEPS}", "--trainer.num_workers=0")
HF_ARGV = ("hf_trainer.py", f"--max-steps={STEPS}")
PL_ARGV = ("lightning_module.py", f"--max-steps={STEPS}")


def _seeded(argv: tuple[str, ...], flag: str, seed: int) -> tuple[str, ...]:
    return (*argv, f"{flag}{seed}")


def _project(
    project: str, config: str, cwd: str, argv: tuple[str, ...], seed_flag: str,
    seeds: tuple[int, ...], bugs: tuple[Bug, ...],
) -> list[Case]:  # fmt: skip
    """Clean runs over ``seeds`` (the first in --quick), then each bug on the first seed."""

    def case(seed: int, bug: Bug | None, quick: bool) -> Case:
        return Case(project, config, cwd, _seeded(argv, seed_flag, seed), str(seed), STEPS,
                    bug=bug, quick=quick)  # fmt: skip

    return [case(s, None, s == seeds[0]) for s in seeds] + [case(seeds[0], b, True) for b in bugs]


def cases() -> list[Case]:
    """Every run, clean runs first; `quick` marks one clean run per project and each bug once.
    nanoGPT fixes its seed (1337) in train.py, so its runs differ by config instead."""
    n = STEPS + 1  # nanoGPT runs iterations 0..max_iters
    a, acc = ("nanoGPT", "shakespeare-char-cpu"), ("nanoGPT", "char-cpu-accum4")
    nano = [
        Case(*a, ".", NANO_A, "1337", n, quick=True),
        Case(*acc, ".", NANO_ACC, "1337", n, ACC4),
        Case(*a, ".", NANO_A, "1337", n, bug=NANO_NO_ZERO, quick=True),
        Case(*acc, ".", NANO_ACC, "1337", n, ACC4, NANO_ZERO_IN_MICRO, True),
        Case(*a, ".", NANO_A, "1337", n, bug=NANO_ITEM_BREAK, quick=True),
        Case(*a, ".", NANO_A, "1337", n, bug=LR_1E3_NANO),
    ]
    return [
        *nano,
        *_project("minGPT", "adder-gpt-nano", "projects/adder", MIN_ARGV, "--system.seed=",
                  (3407, 1, 2), (MIN_PLAIN_LIST, MIN_NO_ZERO)),
        *_project("hf-trainer", "tiny-gpt2", ".", HF_ARGV, "--seed=", (0, 1),
                  (LR_1E3_HF, HF_DETACH_BREAK)),
        *_project("lightning", "mlp-steplr", ".", PL_ARGV, "--seed=", (0, 1),
                  (PL_SCHED_PER_BATCH, PL_NAN_BATCH)),
    ]  # fmt: skip
