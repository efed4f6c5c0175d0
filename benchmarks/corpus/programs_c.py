"""Self-supervised, distillation, sequence-to-sequence, Hugging Face `Trainer`, mixed
precision, activation checkpointing, `torch.compile` and gradient-accumulation programs of
the corpus (see spec.py). Each runs unmodified at its pinned commit on the CPU."""

from __future__ import annotations

from programs_b import NANO
from spec import Program

SIMCLR = "sthalles/SimCLR"
SIMCLR_AT = "1848fc934ad844ae630e6c452300433fe99acfd9"
BYOL = "sthalles/PyTorch-BYOL"
BYOL_AT = "f007ed6b3619a3ae00eb9c95cde342eac5b98923"
# its sizes live in config/config.yaml (no CLI): 1 epoch of batches of 4 at 32 px, no workers
BYOL_CONFIG = (
    "sed -i -e 's/batch_size: 64/batch_size: 4/' -e 's/max_epochs: 40/max_epochs: 1/' "
    "-e 's/num_workers: 4/num_workers: 0/' -e 's/input_shape: (96,96,3)/input_shape: (32,32,3)/' "
    "config/config.yaml"
)
EXAMPLES = "pytorch/examples"
EXAMPLES_AT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"
TRL = "huggingface/trl"
TRL_AT = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"
TINY_LM = "$PYTHON $CORPUS_SHIMS/hfhub/tiny_lm.py"
# the scripts import the `trl` package of their own tree (pip install -e . in its readme):
# a link beside each script stands in for the install; the model and data are local
TRL_SETUP = (
    "ln -sfn .. trl/scripts/trl",
    "ln -sfn ../../trl examples/scripts/trl",
    f"{TINY_LM} model corpus/student > /dev/null",
    f"{TINY_LM} model corpus/teacher --layers 4 --hidden 96 --seed 1 > /dev/null",
    f"{TINY_LM} data corpus/text --kind text --rows 1200",
    f"{TINY_LM} data corpus/prompts --kind prompt --rows 1200 --words 12",
)
# the teacher of the distillation: the larger tiny model fine-tuned by the same SFT script
TEACHER_SFT = (
    "OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $PYTHON trl/scripts/sft.py "
    "--model_name_or_path corpus/teacher --dataset_name corpus/text --output_dir "
    "corpus/teacher-sft --max_length 64 "
    "--learning_rate 1e-3 --per_device_train_batch_size 8 --max_steps 150 --save_strategy no "
    "--report_to none --seed 0 --use_cpu --bf16 False > corpus/teacher-sft.log 2>&1"
)
DISTILL = (
    "--model_name_or_path", "corpus/student", "--teacher_model_name_or_path",
    "corpus/teacher-sft", "--dataset_name", "corpus/prompts", "--output_dir",
    "corpus/out-distill", "--learning_rate", "1e-3", "--per_device_train_batch_size", "4",
    "--max_steps", "300", "--max_completion_length", "16", "--logging_steps", "50",
    "--save_strategy", "no", "--report_to", "none", "--seed", "0", "--use_cpu", "--bf16",
    "False",
)  # fmt: skip
SFT = (
    "--model_name_or_path", "corpus/student", "--dataset_name", "corpus/text",
    "--output_dir", "corpus/out-sft", "--max_length", "64", "--learning_rate", "1e-3",
    "--per_device_train_batch_size", "4", "--max_steps", "300", "--logging_steps", "50",
    "--save_strategy", "no", "--report_to", "none", "--seed", "0", "--use_cpu",
)  # fmt: skip
NANOGPT = "karpathy/nanoGPT"
NANOGPT_AT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
# nanoGPT's README "baby GPT" for a CPU, as in programs_b.py, but compiled
NANO_COMPILED = tuple("--compile=True" if a == "--compile=False" else a for a in NANO)
CHAR_DATA = "$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py nanogpt-char data/shakespeare_char"

PROGRAMS: list[Program] = [
    # SimCLR (contrastive, two augmented views per image, InfoNCE over the batch) with a
    # ResNet-18 on CIFAR-10's shapes: the torchvision shim's synthetic set of 1,208 images
    # gives one epoch of 302 batches of 4 images (8 views; drop_last)
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
            "4",
            "--disable-cuda",
            "--log-every-n-steps",
            "50",
        ),
        shims=("torchvision", "tensorboard"),
        env=(("TV_SHIM_TRAIN", "1208"), ("TV_SHIM_TEST", "64")),
        tags=("ssl-momentum",),
        timeout=1200,
    ),
    # BYOL: an online ResNet-18 and predictor learn to match a momentum (EMA, m=0.996) target
    # network that gets no gradients, on two augmented views of STL-10-shaped images (the
    # torchvision shim's 1,200, cropped to 32 px): one epoch of 300 batches of 4
    Program(
        BYOL,
        BYOL_AT,
        "main.py",
        setup=(BYOL_CONFIG,),
        shims=("torchvision", "tensorboard"),
        env=(("TV_SHIM_TRAIN", "1200"), ("TV_SHIM_TEST", "64")),
        tags=("ssl-momentum", "resnet-bn"),
        timeout=1200,
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
    # Hugging Face `Trainer`: TRL's supervised fine-tuning script (SFTTrainer, a `Trainer`)
    # on a tiny Llama-architecture model and local text, through its own CLI: bf16 autocast
    # on the CPU (TRL's default precision; accelerate wraps the forward), activation
    # checkpointing and two micro-batches per optimizer step, 300 optimizer steps
    Program(
        TRL,
        TRL_AT,
        "trl/scripts/sft.py",
        args=(*SFT, "--gradient_checkpointing", "--gradient_accumulation_steps", "2"),
        setup=TRL_SETUP,
        cwd=".",
        tags=("hf-trainer", "transformer-lm", "amp", "checkpointing", "accumulation"),
        timeout=1500,
    ),
    # knowledge distillation through a `Trainer`: TRL's on-policy distillation script (the
    # student samples 16-token completions of local prompts, the frozen teacher scores them,
    # generalised Jensen-Shannon loss), from the SFT-trained larger tiny model into the
    # smaller one, in fp32
    Program(
        TRL,
        TRL_AT,
        "examples/scripts/distillation.py",
        args=DISTILL,
        setup=(*TRL_SETUP, TEACHER_SFT),
        cwd=".",
        tags=("hf-trainer", "distill", "transformer-lm"),
        timeout=1500,
    ),
]
