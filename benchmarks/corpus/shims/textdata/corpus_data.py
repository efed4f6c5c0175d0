"""Synthetic stand-ins for the datasets the corpus's language, graph and sequence programs
read, written by setup commands (no network): ``$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py
KIND DEST [options]``.

Kinds:
- ``text FILE [--chars N]``: plain English-and-code text, the Python stdlib's own sources
  (ASCII, in file-name order), for char-level models that read ``input.txt``.
- ``nanogpt-char DIR``: ``train.bin``/``val.bin``/``meta.pkl`` as nanoGPT's
  ``shakespeare_char/prepare.py`` writes them, from that text.
- ``wikitext DIR``: ``train.txt``/``valid.txt``/``test.txt`` in WikiText-2's form (one
  paragraph a line, rare words as ``<unk>``).
- ``wikitext-file FILE --tokens N``: one file of WikiText-2-form lines holding exactly N
  tokens counting an end-of-line token per line (Lightning's demo `WikiText2` reads one
  ``wikitext-2.txt`` and cuts it into blocks, so N sets its length).
- ``cora DIR [--nodes N --features F --classes C]``: ``cora.content``/``cora.cites`` in the
  Cora citation graph's format: a planted-partition graph whose node features are bag-of-
  words drawn from a class-specific vocabulary, so a GCN/GAT can learn the labels.
- ``lightning-mnist ROOT [--train N --test M]``: ``ROOT/MNIST/complete/training.pt`` and
  ``test.pt`` as Lightning's demo `MNIST` loads them (a (uint8 images, labels) tuple each):
  one blurred random prototype per digit class plus noise, learnable but not trivial.
All outputs are deterministic (the graph from a fixed seed).
"""

from __future__ import annotations

import argparse
import collections
import pickle
import random
import sysconfig
from pathlib import Path


def local_text(limit: int) -> str:
    """The first ``limit`` characters of the stdlib's ``*.py`` sources, ASCII only."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="ignore").encode("ascii", "ignore")
        parts.append(text.decode())
        size += len(parts[-1])
        if size >= limit:
            break
    return "".join(parts)[:limit]


def write_text(dest: Path, chars: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(local_text(chars))


def write_nanogpt_char(dest: Path, chars: int) -> None:
    import numpy as np

    dest.mkdir(parents=True, exist_ok=True)
    data = local_text(chars)
    vocab = sorted(set(data))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    ids = np.array([stoi[c] for c in data], dtype=np.uint16)
    cut = int(len(ids) * 0.9)
    ids[:cut].tofile(dest / "train.bin")
    ids[cut:].tofile(dest / "val.bin")
    meta = {"vocab_size": len(vocab), "itos": dict(enumerate(vocab)), "stoi": stoi}
    with open(dest / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)


def write_wikitext(dest: Path, vocab: int, train_words: int) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    lines = [" ".join(line.split()) for line in local_text(3_000_000).splitlines()]
    lines = [line for line in lines if line]
    counts = collections.Counter(w for line in lines for w in line.split())
    keep = {w for w, _ in counts.most_common(vocab)}
    lines = [" ".join(w if w in keep else "<unk>" for w in line.split()) for line in lines]
    i = 0
    for part, words in (("train", train_words), ("valid", 20_000), ("test", 20_000)):
        out: list[str] = []
        count = 0
        while count < words and i < len(lines):
            out.append(f" {lines[i]} ")
            count += len(lines[i].split()) + 1
            i += 1
        (dest / f"{part}.txt").write_text("\n".join(out) + "\n")


def write_wikitext_file(dest: Path, vocab: int, tokens: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    lines = [" ".join(line.split()) for line in local_text(3_000_000).splitlines()]
    counts = collections.Counter(w for line in lines for w in line.split())
    keep = {w for w, _ in counts.most_common(vocab)}
    out: list[str] = []
    count = 0
    for line in lines:
        words = [w if w in keep else "<unk>" for w in line.split()]
        if not words:
            continue
        words = words[: tokens - count - 1]
        out.append(" ".join(words))
        count += len(words) + 1
        if count >= tokens - 1:
            break
    if count < tokens:
        raise SystemExit(f"the local text holds only {count} tokens, not {tokens}")
    dest.write_text("\n".join(out) + "\n")


def write_lightning_mnist(root: Path, train: int, test: int) -> None:
    import torch

    gen = torch.Generator().manual_seed(60000)
    protos = torch.rand(10, 1, 28, 28, generator=gen)
    protos = torch.nn.functional.avg_pool2d(protos, 5, stride=1, padding=2).squeeze(1)
    protos = (protos - protos.mean()) / protos.std()
    dest = root / "MNIST" / "complete"
    dest.mkdir(parents=True, exist_ok=True)
    for name, n in (("training.pt", train), ("test.pt", test)):
        labels = torch.randint(0, 10, (n,), generator=gen)
        noise = torch.randn(n, 28, 28, generator=gen)
        images = (128 + 60 * protos[labels] + 40 * noise).clamp(0, 255).to(torch.uint8)
        torch.save((images, labels), dest / name)


def write_cora(dest: Path, nodes: int, features: int, classes: int) -> None:
    rng = random.Random(1433)
    dest.mkdir(parents=True, exist_ok=True)
    ids = rng.sample(range(1, 10 * nodes), nodes)
    labels = [i % classes for i in range(nodes)]
    rng.shuffle(labels)
    per_class = features // classes
    content = []
    for node, label in zip(ids, labels, strict=True):
        own = range(label * per_class, (label + 1) * per_class)
        words = set(rng.sample(own, min(6, len(own))))
        words |= set(rng.sample(range(features), min(6, features)))
        row = ["1" if j in words else "0" for j in range(features)]
        content.append(f"{node}\t" + "\t".join(row) + f"\tclass_{label}")
    (dest / "cora.content").write_text("\n".join(content) + "\n")
    by_class: dict[int, list[int]] = collections.defaultdict(list)
    for node, label in zip(ids, labels, strict=True):
        by_class[label].append(node)
    edges = set()
    for node, label in zip(ids, labels, strict=True):
        for _ in range(2):
            other = rng.choice(by_class[label]) if rng.random() < 0.8 else rng.choice(ids)
            if other != node:
                edges.add((other, node))
    (dest / "cora.cites").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(edges)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "kind",
        choices=("text", "nanogpt-char", "wikitext", "wikitext-file", "cora", "lightning-mnist"),
    )
    parser.add_argument("dest", type=Path)
    parser.add_argument("--chars", type=int, default=1_200_000)
    parser.add_argument("--vocab", type=int, default=3000)
    parser.add_argument("--train-words", type=int, default=280_000)
    parser.add_argument("--tokens", type=int, default=150_000)
    parser.add_argument("--train", type=int, default=60_000)
    parser.add_argument("--test", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1800)
    parser.add_argument("--features", type=int, default=280)
    parser.add_argument("--classes", type=int, default=7)
    args = parser.parse_args()
    if args.kind == "text":
        write_text(args.dest, args.chars)
    elif args.kind == "nanogpt-char":
        write_nanogpt_char(args.dest, args.chars)
    elif args.kind == "wikitext":
        write_wikitext(args.dest, args.vocab, args.train_words)
    elif args.kind == "wikitext-file":
        write_wikitext_file(args.dest, args.vocab, args.tokens)
    elif args.kind == "lightning-mnist":
        write_lightning_mnist(args.dest, args.train, args.test)
    else:
        write_cora(args.dest, args.nodes, args.features, args.classes)


if __name__ == "__main__":
    main()
