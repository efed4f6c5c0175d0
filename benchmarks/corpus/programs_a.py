"""Vision and generative programs of the corpus (see spec.py): CNN classification, ResNet
with BatchNorm, GANs, VAE, diffusion, self-supervised learning, distillation, fine-tuning,
AMP, accumulation, checkpointing. Each runs unmodified at its pinned commit; the
`torchvision` shim stands in for torchvision and its datasets (synthetic, learnable), sized
by ``TV_SHIM_TRAIN`` / ``TV_SHIM_TEST`` so that the program's own epoch count gives >= 300
optimizer steps."""

from __future__ import annotations

from spec import Program

TV = ("torchvision",)
PLOT = ("matplotlib",)

EXAMPLES = "pytorch/examples"
EXAMPLES_AT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"
DIFFUSION = "bot66/MNISTDiffusion"
DIFFUSION_AT = "c7ba8e09174cbb88b9cc314db3bf2e514668681c"
YUNJEY = "yunjey/pytorch-tutorial"
YUNJEY_AT = "0500d3df5a2a8080ccfccbc00aca0eacc21818db"
MORVAN = "MorvanZhou/PyTorch-Tutorial"
MORVAN_AT = "dbe154a9e56635e51c6b0c2ccea8ae36cfb585a7"
GAN = "eriklindernoren/PyTorch-GAN"
GAN_AT = "36d3c77e5ff20ebe0aeefd322326a134a279b93e"


def _mnist(train: int, test: int = 128) -> tuple[tuple[str, str], ...]:
    return (("TV_SHIM_TRAIN", str(train)), ("TV_SHIM_TEST", str(test)))


def _gan(name: str, tags: tuple[str, ...], *extra: str, script: str = "") -> Program:
    """A PyTorch-GAN MNIST program: 5 epochs of 64 batches of 16 (320 discriminator steps)."""
    return Program(
        GAN,
        GAN_AT,
        f"implementations/{name}/{script or name}.py",
        args=("--n_epochs", "5", "--batch_size", "16", "--sample_interval", "160", *extra),
        env=_mnist(1024),
        shims=TV,
        tags=tags,
    )


def _yunjey(path: str, train: int, tags: tuple[str, ...] = ()) -> Program:
    """A yunjey/pytorch-tutorial script: no CLI; its fixed epochs and batch size over a
    synthetic dataset of ``train`` samples give the steps."""
    return Program(
        YUNJEY, YUNJEY_AT, f"tutorials/{path}/main.py", env=_mnist(train, 200), shims=TV, tags=tags
    )


def _morvan(script: str, train: int = 0, tags: tuple[str, ...] = ()) -> Program:
    """A MorvanZhou/PyTorch-Tutorial script (plots drawn by the no-op matplotlib shim)."""
    return Program(
        MORVAN,
        MORVAN_AT,
        f"tutorial-contents/{script}.py",
        env=_mnist(train, 500) if train else (),
        shims=(*TV, *PLOT),
        tags=tags,
    )


PROGRAMS: list[Program] = [
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "mnist/main.py",
        args=("--epochs", "1", "--batch-size", "8", "--test-batch-size", "64", "--no-accel",
              "--log-interval", "50", "--lr", "0.5"),
        env=_mnist(2560, 256),
        shims=TV,
        tags=("cnn",),
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "vae/main.py",
        args=("--epochs", "5", "--batch-size", "16", "--no-accel", "--log-interval", "20"),
        env=_mnist(1024, 128),
        setup=("mkdir -p vae/results",),
        shims=TV,
        tags=("vae",),
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "dcgan/main.py",
        args=("--dataset", "fake", "--workers", "0", "--batchSize", "3", "--niter", "1",
              "--ngf", "8", "--ndf", "8", "--nz", "16", "--manualSeed", "1", "--outf", "out"),
        shims=TV,
        tags=("gan-dcgan",),
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "siamese_network/main.py",
        args=("--epochs", "1", "--batch-size", "4", "--test-batch-size", "64", "--no-accel",
              "--log-interval", "50"),
        env=_mnist(1200, 128),
        shims=TV,
        tags=("resnet-bn",),
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "mnist_rnn/main.py",
        args=("--epochs", "1", "--batch-size", "8", "--test-batch-size", "64",
              "--log-interval", "50"),
        env=_mnist(2400, 128),
        shims=TV,
    ),
    Program(  # one optimizer per layer, each trained on its own local loss
        EXAMPLES,
        EXAMPLES_AT,
        "mnist_forward_forward/main.py",
        args=("--epochs", "300", "--no_accel", "--train_size", "256", "--test_size", "128",
              "--log-interval", "50"),
        env=_mnist(256, 128),
        shims=TV,
    ),
    Program(  # a UNet DDPM with an EMA copy (AveragedModel) and OneCycleLR; 4 loader workers
        DIFFUSION,
        DIFFUSION_AT,
        "train_mnist.py",
        args=("--cpu", "--epochs", "2", "--batch_size", "4", "--model_base_dim", "8",
              "--timesteps", "50", "--n_samples", "4", "--log_freq", "40"),
        env=_mnist(640, 64),
        shims=TV,
        tags=("diffusion",),
    ),
    _gan("gan", ("gan-dcgan",)),
    _gan("dcgan", ("gan-dcgan",), "--img_size", "16", "--latent_dim", "32"),
    _gan("wgan", ("wgan-gp",)),
    _gan("wgan_gp", ("wgan-gp",)),
    _gan("wgan_div", ("wgan-gp",)),
    _gan("lsgan", ("gan-dcgan",), "--img_size", "16"),
    _gan("acgan", ("gan-dcgan",), "--img_size", "16"),
    _gan("cgan", ("gan-dcgan",)),
    _gan("infogan", ("gan-dcgan",), "--img_size", "16"),
    _gan("aae", ("vae",)),
    _gan("dragan", ("gan-dcgan",), "--img_size", "16"),
    _gan("relativistic_gan", ("gan-dcgan",), "--img_size", "16"),
    # yunjey/pytorch-tutorial: 5 epochs x 60 batches of 100, ...
    _yunjey("01-basics/feedforward_neural_network", 6000),
    _yunjey("02-intermediate/convolutional_neural_network", 6000, ("cnn",)),
    _yunjey("02-intermediate/deep_residual_network", 304, ("resnet-bn",)),  # 80 x 4 batches
    _yunjey("02-intermediate/recurrent_neural_network", 15000),  # 2 x 150 batches
    _yunjey("03-advanced/generative_adversarial_network", 200, ("gan-dcgan",)),  # 200 x 2
    _yunjey("03-advanced/variational_autoencoder", 2560, ("vae",)),  # 15 x 20 batches of 128
    # MorvanZhou/PyTorch-Tutorial
    _morvan("401_CNN", 15000, ("cnn",)),  # 1 epoch of 300 batches of 50
    _morvan("402_RNN_classifier", 19200),  # 1 epoch of 300 batches of 64
    _morvan("404_autoencoder", 1920, ("vae",)),  # 10 x 30 batches of 64
    _morvan("306_optimizer"),  # four nets, four optimizers, 12 x 32 batches
    _morvan("503_dropout"),  # 500 steps, with and without dropout
    _morvan("504_batch_normalization", tags=("resnet-bn",)),  # 12 x 32 batches, BN or not
]  # fmt: skip
