"""Vision and generative programs of the corpus (see spec.py): CNN classification, ResNet
with BatchNorm, GANs, VAE, diffusion, self-supervised learning, distillation, fine-tuning,
AMP, accumulation, checkpointing. Each runs unmodified at its pinned commit; the
`torchvision` shim stands in for torchvision and its datasets (synthetic, learnable)."""

from __future__ import annotations

from spec import Program

EXAMPLES = "pytorch/examples"
EXAMPLES_AT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"

PROGRAMS: list[Program] = [
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "mnist/main.py",
        args=("--epochs", "1", "--batch-size", "8", "--test-batch-size", "64", "--no-accel",
              "--log-interval", "50", "--lr", "0.5"),
        env=(("TV_SHIM_TRAIN", "2560"), ("TV_SHIM_TEST", "256")),
        shims=("torchvision",),
        tags=("cnn",),
    ),
]  # fmt: skip
