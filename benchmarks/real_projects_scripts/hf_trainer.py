"""A tiny GPT-2 language model trained with Hugging Face's `Trainer`, as its users write it.

Built from a config (no hub download) and trained character-level on `input.txt` (local
text the benchmark writes next to this file). The loss is a custom `compute_loss`, the
usual way to change what `Trainer` optimises. Run: `python hf_trainer.py --max-steps 400
--seed 0 [--schedule cosine --warmup-steps 0]`.
"""

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

LR = 5e-4
BLOCK = 32


class CharChunks(Dataset):
    """Random-access fixed-length character windows of one text."""

    def __init__(self, text: str, block: int) -> None:
        chars = sorted(set(text))
        self.vocab = len(chars)
        index = {c: i for i, c in enumerate(chars)}
        self.ids = torch.tensor([index[c] for c in text], dtype=torch.long)
        self.block = block

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.block

    def __getitem__(self, i: int) -> dict:
        chunk = self.ids[i * self.block : (i + 1) * self.block + 1]
        return {"input_ids": chunk[:-1], "labels": chunk[1:]}


class CharTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))
        return (loss, outputs) if return_outputs else loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--schedule", default="linear", help="Trainer's lr_scheduler_type")
    parser.add_argument("--warmup-steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    data = CharChunks(Path("input.txt").read_text()[:400_000], BLOCK)
    config = GPT2Config(
        vocab_size=data.vocab, n_positions=BLOCK, n_embd=48, n_layer=2, n_head=2,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    targs = TrainingArguments(
        output_dir="out-hf",
        max_steps=args.max_steps,
        per_device_train_batch_size=8,
        learning_rate=LR,
        warmup_steps=args.warmup_steps,
        lr_scheduler_type=args.schedule,
        logging_steps=50,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    CharTrainer(model=model, args=targs, train_dataset=data).train()


if __name__ == "__main__":
    main()
