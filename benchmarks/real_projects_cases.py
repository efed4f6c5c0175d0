"""What `real_projects.py` runs: the projects, their configs and the bugs injected into copies.

Each :class:`Case` is one `gradwatch run` of one project's unmodified training entry point
(or of a copy with one bug injected by exact text replacement: a replacement that no longer
matches the project's code is an error, never a silently clean run). The configs are the
ones the projects document for a CPU (nanoGPT's README "baby GPT on a MacBook" flags,
minGPT's adder), shrunk only in model size and step count.
"""

from __future__ import annotations

import collections
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
    project: str  # nanoGPT | minGPT | hf-trainer | lightning | pytorch-examples
    config: str  # short name of the config
    cwd: str  # working directory inside the copy
    argv: tuple[str, ...]  # the user's command, after `python`
    seed: str  # the seed the run uses (as the project sets it)
    steps: int  # optimizer updates the run makes (0: read from its output, see steps_from)
    gw_args: tuple[str, ...] = ()
    bug: Bug | None = None
    quick: bool = False  # part of the --quick subset
    #: (file, old, new) applied to the copy for the config itself, not a bug: only where a
    #: project has no flag for it (nanoGPT's seed is a literal in train.py)
    setup: tuple[tuple[str, str, str], ...] = ()
    #: a regular expression whose group 1 in the script's stdout is its number of updates
    steps_from: str | None = None

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
    ("lr-too-large",),
    step=1,
)
# nanoGPT sets its learning rate by hand every iteration, warming up over 100 of them, so the
# bad rate builds up: 0.0099 at step 1 (iteration 0), 0.05 at step 5, when the loss jumps
# from 3.4 to 11 (measured with --log_interval=1); the bug shows there, not at step 1.
LR_1E3_NANO = Bug(
    "lr-x1000",
    (("config/train_shakespeare_char.py", "learning_rate = 1e-3", "learning_rate = 1e-3 * 1e3"),),
    LR_1E3_HF.expect,
    step=5,
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


def nano_seed(seed: int) -> tuple[tuple[str, str, str], ...]:
    """nanoGPT's seed (1337, a literal in train.py) replaced by ``seed``."""
    old = "torch.manual_seed(1337 + seed_offset)"
    return () if seed == 1337 else (("train.py", old, f"torch.manual_seed({seed} + seed_offset)"),)


def write_wikitext(dest: Path, vocab: int = 3000) -> None:
    """train/valid/test.txt in WikiText-2's form (one line of space-separated words per
    paragraph, rare words as ``<unk>``) from the local text: the word_language_model example
    reads them; ~280k training words make 400 batches at its defaults (20 x 35)."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = [" ".join(line.split()) for line in local_text(3_000_000).splitlines()]
    lines = [line for line in lines if line]
    counts = collections.Counter(w for line in lines for w in line.split())
    keep = {w for w, _ in counts.most_common(vocab)}
    lines = [" ".join(w if w in keep else "<unk>" for w in line.split()) for line in lines]
    i = 0
    for part, words in (("train", 280_000), ("valid", 20_000), ("test", 20_000)):
        out: list[str] = []
        count = 0
        while count < words and i < len(lines):
            out.append(f" {lines[i]} ")
            count += len(lines[i].split()) + 1  # data.py adds <eos> to every line
            i += 1
        (dest / f"{part}.txt").write_text("\n".join(out) + "\n")


MIN_ARGV = ("adder.py", f"--trainer.max_iters={STEPS}", "--trainer.num_workers=0")
HF_ARGV = ("hf_trainer.py", f"--max-steps={STEPS}")
PL_ARGV = ("lightning_module.py", f"--max-steps={STEPS}")
HF_COSINE = (*HF_ARGV, "--schedule=cosine", "--warmup-steps=0")
PL_SGD = (*PL_ARGV, "--optimizer=sgd")


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
        *(Case(*a, ".", NANO_A, str(s), n, setup=nano_seed(s)) for s in (1, 2)),
        Case(*acc, ".", NANO_ACC, "1337", n, ACC4),
        Case(*acc, ".", NANO_ACC, "1", n, ACC4, setup=nano_seed(1)),
        Case(*a, ".", NANO_A, "1337", n, bug=NANO_NO_ZERO, quick=True),
        Case(*acc, ".", NANO_ACC, "1337", n, ACC4, NANO_ZERO_IN_MICRO, True),
        Case(*a, ".", NANO_A, "1337", n, bug=NANO_ITEM_BREAK, quick=True),
        Case(*a, ".", NANO_A, "1337", n, bug=LR_1E3_NANO, quick=True),
    ]
    return [
        *nano,
        *_project("minGPT", "adder-gpt-nano", "projects/adder", MIN_ARGV, "--system.seed=",
                  (3407, 1, 2), (MIN_PLAIN_LIST, MIN_NO_ZERO)),
        *_project("hf-trainer", "tiny-gpt2", ".", HF_ARGV, "--seed=", (0, 1),
                  (LR_1E3_HF, HF_DETACH_BREAK)),
        *_project("hf-trainer", "tiny-gpt2-cosine-nowarmup", ".", HF_COSINE, "--seed=", (2,), ()),
        *_project("lightning", "mlp-steplr", ".", PL_ARGV, "--seed=", (0, 1),
                  (PL_SCHED_PER_BATCH, PL_NAN_BATCH)),
        *_project("lightning", "mlp-sgd-momentum-lr0.1", ".", PL_SGD, "--seed=", (2,), ()),
        *examples(),
    ]  # fmt: skip


def examples() -> list[Case]:
    """pytorch/examples whose loops update parameters by hand (no torch.optim): watched,
    one step per update, and quiet. `regression` trains until its loss is below 1e-3 and
    is unseeded (two runs); word_language_model runs one epoch of the local WikiText-like
    text (400 batches), as its README's LSTM and its Transformer with AdamW."""
    ex = "pytorch-examples"
    done = r"after (\d+) batches"
    wlm = ("main.py", "--epochs", "1")
    adamw = (*wlm, "--model", "Transformer", "--use-optimizer", "--lr", "0.001")
    return [
        *(Case(ex, "regression", "regression", ("main.py",), f"unseeded-{k}", 0,
               steps_from=done, quick=k == 1) for k in (1, 2)),
        Case(ex, "word_language_model-lstm", "word_language_model", wlm, "1111", STEPS,
             quick=True),
        Case(ex, "word_language_model-transformer-adamw", "word_language_model", adamw, "1111",
             STEPS),
    ]  # fmt: skip
