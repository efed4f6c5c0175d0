"""Write what a Hugging Face training program loads with ``from_pretrained(path)``: a tiny,
randomly initialised causal language model and its tokenizer, and a small local dataset.

    $PYTHON $CORPUS_SHIMS/hfhub/tiny_lm.py model DIR [--arch llama|gpt2 --vocab N
        --layers L --hidden H --heads A --positions P --seed S]
    $PYTHON $CORPUS_SHIMS/hfhub/tiny_lm.py data DIR --kind text|prompt --rows N [--words W]

The tokenizer is a byte-level BPE (GPT-2's kind; ``<|endoftext|>`` is its end of text and
padding token) learnt from the Python standard library's sources, with a minimal chat
template; the model is seeded, so the files are the same on every run. ``data`` writes
``DIR/train.jsonl`` (and ``test.jsonl``) for ``datasets.load_dataset(DIR)``: ``text`` rows
of local text for language modelling, or ``prompt`` rows (a one-message conversation) for
trainers that complete prompts. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "textdata"))
from corpus_data import local_text

EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}" + EOS + "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def train_tokenizer(vocab: int, chars: int):  # -> transformers.PreTrainedTokenizerFast
    """A byte-level BPE of ``vocab`` tokens learnt from ``chars`` characters of local text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = local_text(chars)
    bpe.train_from_iterator((text[i : i + 4096] for i in range(0, len(text), 4096)), trainer)
    tokenizer = GPT2TokenizerFast(
        tokenizer_object=bpe, bos_token=EOS, eos_token=EOS, unk_token=EOS, pad_token=EOS
    )
    tokenizer.model_max_length = 1024
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def model_config(args: argparse.Namespace, vocab: int, eos: int):  # -> PretrainedConfig
    from transformers import GPT2Config, LlamaConfig

    if args.arch == "gpt2":
        return GPT2Config(
            vocab_size=vocab, n_positions=args.positions, n_embd=args.hidden,
            n_layer=args.layers, n_head=args.heads, bos_token_id=eos, eos_token_id=eos,
        )  # fmt: skip
    return LlamaConfig(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.heads, max_position_embeddings=args.positions,
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False,
    )  # fmt: skip


def write_model(dest: Path, args: argparse.Namespace) -> None:
    """The tokenizer and a seeded, untrained model of ``args``' size in ``dest``."""
    import torch
    from transformers import AutoModelForCausalLM

    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(args.vocab, args.chars)
    tokenizer.save_pretrained(dest)
    torch.manual_seed(args.seed)
    config = model_config(args, len(tokenizer), tokenizer.eos_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(dest)


def write_data(dest: Path, kind: str, rows: int, words: int) -> None:
    """``rows`` training rows (and a tenth as many test rows) of ``words`` words each."""
    dest.mkdir(parents=True, exist_ok=True)
    tokens = local_text(rows * words * 12).split()
    for split, count, start in (("train", rows, 0), ("test", max(rows // 10, 1), rows)):
        with open(dest / f"{split}.jsonl", "w") as out:
            for i in range(start, start + count):
                piece = " ".join(tokens[i * words : (i + 1) * words])
                row = {"text": piece} if kind == "text" else {
                    "prompt": [{"role": "user", "content": piece}]
                }  # fmt: skip
                out.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("model")
    m.add_argument("dest", type=Path)
    m.add_argument("--arch", choices=["llama", "gpt2"], default="llama")
    m.add_argument("--vocab", type=int, default=512)
    m.add_argument("--chars", type=int, default=400_000)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=64)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--positions", type=int, default=256)
    m.add_argument("--seed", type=int, default=0)
    d = sub.add_parser("data")
    d.add_argument("dest", type=Path)
    d.add_argument("--kind", choices=["text", "prompt"], default="text")
    d.add_argument("--rows", type=int, default=1200)
    d.add_argument("--words", type=int, default=24)
    args = ap.parse_args()
    if args.what == "model":
        write_model(args.dest, args)
    else:
        write_data(args.dest, args.kind, args.rows, args.words)


if __name__ == "__main__":
    main()
