"""Programs of the corpus's fourth held-out round (public programs nobody on the team had
run, each run first under `gradwatch run` as the collector stood at round4's branch point,
8c15f01): federated averaging (many client models, each a deep copy of the global model
with its own SGD, averaged into the global model by ``load_state_dict``), a normalizing
flow (neural spline coupling layers, ActNorm with a data-dependent start, invertible 1x1
"convolutions" from an LU decomposition; the loss a negative log-likelihood through
log-determinants), gradient checkpointing (a memory-efficient DenseNet-BC whose bottlenecks run
under ``torch.utils.checkpoint``: the forward pass recomputed during backward) and a
spectral-normalised GAN written before ``torch.nn.utils.spectral_norm`` (its own module:
the weight replaced by ``weight_bar`` / sigma at every forward, the power-iteration vectors
``weight_u``, ``weight_v`` parameters that do not require a gradient and that it rewrites
through ``.data``). Each runs unmodified at its pinned commit on the CPU (see spec.py)."""

from __future__ import annotations

from programs_f import LEGACY_TORCHVISION
import shlex

from spec import Program

FEDAVG = "shaoxiongji/federated-learning"
FEDAVG_AT = "5a9da1acd210aef030ff3841665c6d0cc0c8be23"
FLOWS = "tonyduan/normalizing-flows"
FLOWS_AT = "3ee9127e3753be3878a0a4fd3ea435ff2d31d143"
DENSENET = "gpleiss/efficient_densenet_pytorch"
DENSENET_AT = "d2d0629dae2912ec4f0444fab5e3df4c375c44fd"
SNGAN = "christiancosgrove/pytorch-spectral-normalization-gan"
SNGAN_AT = "12dcf945a6359301d63d1e0da3708cd0f0590b19"

#: the script was written for torch 0.3 (``disc_loss.data[0]`` to print a loss): the
#: package of programs_f.py (``t[0]`` of a 0-dim tensor is its number, then the
#: torchvision shim) is written beside it (our setup, not theirs)
SNGAN_SETUP = (
    "mkdir -p torchvision && printf '%s' "
    f"{shlex.quote(LEGACY_TORCHVISION)} > torchvision/__init__.py",
)

PROGRAMS: list[Program] = [
    # federated averaging (FedAvg, McMahan et al.): 10 clients holding 600 of MNIST's
    # shapes each (the torchvision shim's 6,000, split i.i.d.), a 784-200-10 MLP with
    # dropout; each of 3 rounds picks 3 clients at random, each trains a deep copy of the
    # global model with a new SGD (lr 0.01, momentum 0.5) for 5 local epochs of 60 batches
    # of 10 (300 steps), and the global model is loaded with the average of their state
    # dicts: 9 optimizers of 300 steps, the global model itself never stepped. Needs
    # scikit-learn (imported, unused) and the matplotlib shim (a loss plot at the end)
    Program(
        FEDAVG,
        FEDAVG_AT,
        "main_fed.py",
        args=(
            "--dataset", "mnist", "--model", "mlp", "--iid", "--gpu", "-1",
            "--num_users", "10", "--frac", "0.3", "--epochs", "3",
        ),
        env=(("TV_SHIM_TRAIN", "6000"), ("TV_SHIM_TEST", "600")),
        shims=("torchvision", "matplotlib"),
        steps=300,
    ),
    # a normalizing flow on 2-D data (512 points from three Gaussians, standardised; the
    # same full batch at every step): 2 neural spline coupling flows, each after an
    # ActNorm (its scale and shift set from the first batch) and an invertible 1x1
    # "convolution" (a weight from scipy's LU decomposition: P fixed, L, U and the log of
    # S trained), Adam at 5e-3 for 500 iterations on the negative log-likelihood (prior
    # log-density plus the flows' log-determinants; 3.35 down to 2.39). The script imports ``src.flows`` from the
    # repository root, so the package is linked beside it (our setup). Needs scipy
    Program(
        FLOWS,
        FLOWS_AT,
        "examples/ex_2d.py",
        args=("--flows", "2", "--flow", "NSF_CL", "--actnorm", "--convolve"),
        shims=("matplotlib",),
        setup=("ln -sfn ../src examples/src",),
        steps=500,
    ),
    # gradient checkpointing: a DenseNet-BC of depth 16 (3 dense blocks of 2 layers,
    # growth 12) on CIFAR-10's shapes (the torchvision shim's 4,800, crops and flips),
    # whose bottleneck (BatchNorm-ReLU-1x1 conv over the concatenated features) runs under
    # ``torch.utils.checkpoint`` (re-run during backward, so its BatchNorm sees each batch
    # twice); SGD with Nesterov momentum and weight decay, a MultiStepLR; one epoch of 300
    # batches of 16, then a test pass and the best model saved and reloaded. The command
    # line is python-fire's. Needs ``fire``
    Program(
        DENSENET,
        DENSENET_AT,
        "demo.py",
        args=(
            "--efficient", "True", "--data", "./data", "--save", "./save",
            "--depth", "16", "--n_epochs", "1", "--batch_size", "16", "--valid_size", "0",
        ),
        env=(("TV_SHIM_TRAIN", "4800"), ("TV_SHIM_TEST", "160")),
        shims=("torchvision",),
        steps=300,
        tags=("checkpointing",),
    ),
    # a spectral-normalised GAN (hinge loss, DCGAN-like generator with BatchNorm, a
    # 7-convolution discriminator each wrapped in the repository's own SpectralNorm), 5
    # discriminator steps per generator step, Adam (betas 0, 0.9) for both, batches of 4
    # of CIFAR-10's shapes; the discriminator's loss backpropagates into the generator too
    # (its gradients cleared before the generator's step). Its loop runs 2,000 epochs with
    # no option for fewer: the seed shim's step cap stops it after 300 discriminator steps
    # (60 generator steps); ``.cuda()`` is a no-op (GW_CORPUS_CUDA_AS_CPU)
    Program(
        SNGAN,
        SNGAN_AT,
        "main.py",
        args=("--model", "dcgan", "--batch_size", "4"),
        env=(
            ("TV_SHIM_TRAIN", "1600"), ("TV_SHIM_TEST", "64"),
            ("GW_CORPUS_MAX_STEPS", "300"), ("GW_CORPUS_CUDA_AS_CPU", "1"),
        ),
        shims=("torchvision", "matplotlib"),
        setup=SNGAN_SETUP,
        steps=300,
        tags=("gan-dcgan",),
    ),
]  # fmt: skip
