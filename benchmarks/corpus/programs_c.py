"""Self-supervised, distillation, sequence-to-sequence, Hugging Face `Trainer`, mixed
precision, activation checkpointing, `torch.compile` and gradient-accumulation programs of
the corpus (see spec.py). Each runs unmodified at its pinned commit on the CPU."""

from __future__ import annotations

from spec import Program

SIMCLR = "sthalles/SimCLR"
SIMCLR_AT = "1848fc934ad844ae630e6c452300433fe99acfd9"
EXAMPLES = "pytorch/examples"
EXAMPLES_AT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"
NANOGPT = "karpathy/nanoGPT"
NANOGPT_AT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
# nanoGPT's README "baby GPT" for a CPU, as in programs_b.py, but compiled
NANO_COMPILED = (
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=True",
    "--eval_iters=10",
    "--eval_interval=100",
    "--log_interval=50",
    "--block_size=64",
    "--batch_size=8",
    "--n_layer=2",
    "--n_head=4",
    "--n_embd=64",
    "--max_iters=300",
    "--lr_decay_iters=300",
    "--dropout=0.0",
)
CHAR_DATA = "$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py nanogpt-char data/shakespeare_char"

PROGRAMS: list[Program] = [
    # SimCLR (contrastive, two augmented views per image, InfoNCE over the batch) with a
    # ResNet-18 on CIFAR-10's shapes: the torchvision shim's synthetic set of 2,416 images
    # gives one epoch of 302 batches of 8 images (16 views; drop_last)
    Program(
        SIMCLR,
        SIMCLR_AT,
        "run.py",
        args=(
            "-data",
            "./datasets",
            "-dataset-name",
            "cifar10",
            "-a",
            "resnet18",
            "-j",
            "0",
            "--epochs",
            "1",
            "-b",
            "8",
            "--disable-cuda",
            "--log-every-n-steps",
            "50",
        ),
        shims=("torchvision", "tensorboard"),
        env=(("TV_SHIM_TRAIN", "2416"), ("TV_SHIM_TEST", "64")),
        tags=("ssl-momentum",),
    ),
    # sequence to sequence: pytorch/examples' Transformer translator (encoder-decoder,
    # teacher forcing, padding masks) on the torchtext shim's synthetic German-English pairs
    # (invented words, verb-final order, gendered articles): one epoch of 301 batches of 16
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "language_translation/main.py",
        args=(
            "-e",
            "1",
            "--batch",
            "16",
            "--lr",
            "0.0005",
            "--attn_heads",
            "4",
            "--enc_layers",
            "2",
            "--dec_layers",
            "2",
            "--embed_size",
            "64",
            "--dim_feedforward",
            "128",
            "--logging_dir",
            "./out/",
        ),
        shims=("torchtext",),
        env=(("TEXT_SHIM_TRAIN", "4816"), ("TEXT_SHIM_VALID", "160")),
        tags=("seq2seq",),
    ),
    # torch.compile: nanoGPT's `--compile=True` (TorchInductor on the CPU, which needs a C
    # compiler; the first step waits for the compilation, about a minute)
    Program(
        NANOGPT,
        NANOGPT_AT,
        "train.py",
        args=NANO_COMPILED,
        setup=(CHAR_DATA,),
        tags=("transformer-lm", "compile"),
        timeout=1500,
        variant="compile",
    ),
]
