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
through ``.data``), knowledge distillation from a frozen teacher (RepDistiller: the teacher
trained in setup, loaded, put in eval mode and run under ``no_grad``; the student's loss a
cross-entropy plus a temperature-scaled KL divergence to the teacher's logits), network
slimming (an L1 subgradient on every BatchNorm scale added into ``.grad`` by hand between
``backward()`` and ``step()``, for channel pruning) and stochastic weight averaging (a
second model that no optimizer holds, loaded with the running average of the trained
weights after each epoch from the third on, its BatchNorm statistics recomputed by a pass
over the training data, then evaluated). Each runs unmodified at its pinned commit on the
CPU (see spec.py)."""

from __future__ import annotations

import shlex

from programs_f import LEGACY_TORCHVISION
from spec import Program

FEDAVG = "shaoxiongji/federated-learning"
FEDAVG_AT = "5a9da1acd210aef030ff3841665c6d0cc0c8be23"
FLOWS = "tonyduan/normalizing-flows"
FLOWS_AT = "3ee9127e3753be3878a0a4fd3ea435ff2d31d143"
DENSENET = "gpleiss/efficient_densenet_pytorch"
DENSENET_AT = "d2d0629dae2912ec4f0444fab5e3df4c375c44fd"
SNGAN = "christiancosgrove/pytorch-spectral-normalization-gan"
SNGAN_AT = "12dcf945a6359301d63d1e0da3708cd0f0590b19"
KD = "HobbitLong/RepDistiller"
KD_AT = "b84f547c5db6a35318d4671d7d5c4de74c822403"
SLIM = "Eric-mingjie/network-slimming"
SLIM_AT = "b395dc07521cbc38f741d971a18fe3f6423c9ab1"
SWA = "wjmaddox/swa_gaussian"
SWA_AT = "61a918fa1c3e732dd19fc278ad3a5969f24d5a72"

#: the script was written for torch 0.3 (``disc_loss.data[0]`` to print a loss): the
#: package of programs_f.py (``t[0]`` of a 0-dim tensor is its number, then the
#: torchvision shim) is written beside it (our setup, not theirs)
LEGACY_SETUP = (
    "mkdir -p torchvision && printf '%s' "
    f"{shlex.quote(LEGACY_TORCHVISION)} > torchvision/__init__.py",
)

#: RepDistiller logs through ``tensorboard_logger`` (not installed): a module of ours beside
#: the scripts whose ``Logger`` keeps nothing
KD_LOGGER = (
    "printf 'class Logger:\\n    def __init__(self, *args, **kwargs):\\n        pass\\n\\n"
    "    def log_value(self, *args, **kwargs):\\n        pass\\n' > tensorboard_logger.py"
)
#: the teacher: the repository's own ``train_teacher.py`` (a ResNet-14 for CIFAR-100's
#: shapes, 2 epochs of 150 batches of 32 of the torchvision shim's 4,800; about 55 % test
#: accuracy), run once when the tree is set up, seeded by the seed shim (our setup)
KD_TEACHER = (
    "TV_SHIM_TRAIN=4800 TV_SHIM_TEST=320 GW_CORPUS_SEED=0 PYTHONHASHSEED=0 OMP_NUM_THREADS=1"
    " PYTHONPATH=$CORPUS_SHIMS/torchvision:$CORPUS_SHIMS/PIL:$CORPUS_SHIMS/_seed"
    " $PYTHON train_teacher.py --model resnet14 --epochs 2 --batch_size 32 --num_workers 0"
    " --print_freq 50 > teacher.log 2>&1"
)
KD_TEACHER_PATH = "./save/models/resnet14_cifar100_lr_0.05_decay_0.0005_trial_0/resnet14_best.pth"

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
    # log-density plus the flows' log-determinants; 3.35 down to 2.39). The script imports
    # ``src.flows`` from the repository root, so the package is linked beside it (our
    # setup). Needs scipy
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
        setup=LEGACY_SETUP,
        steps=300,
        tags=("gan-dcgan",),
    ),
    # knowledge distillation (Hinton et al.'s KD in RepDistiller's framework): a ResNet-8
    # student learns from the frozen ResNet-14 teacher trained in setup (loaded from its
    # checkpoint, eval mode, its forward under no_grad), loss 0.1 x cross-entropy + 0.9 x
    # KL(student || teacher) at temperature 4 (times 16); SGD with momentum and weight
    # decay, one epoch of 300 batches of 16 of CIFAR-100's shapes (the torchvision shim's
    # 4,800, crops and flips), a test pass, the best student saved
    Program(
        KD,
        KD_AT,
        "train_student.py",
        args=(
            "--path_t", KD_TEACHER_PATH, "--distill", "kd", "--model_s", "resnet8",
            "-r", "0.1", "-a", "0.9", "-b", "0", "--epochs", "1", "--batch_size", "16",
            "--num_workers", "0", "--print_freq", "50",
        ),
        env=(("TV_SHIM_TRAIN", "4800"), ("TV_SHIM_TEST", "320")),
        shims=("torchvision", "PIL"),
        setup=(KD_LOGGER, KD_TEACHER),
        steps=300,
        tags=("distill",),
    ),
    # network slimming (Liu et al. 2017), its first stage: a VGG-11 with BatchNorm on
    # CIFAR-10's shapes (the torchvision shim's 2,400, padding, crops and flips) trained
    # with channel-sparsity regularisation: after each ``backward()`` the subgradient of an
    # L1 penalty (1e-4 x sign) is added to every BatchNorm scale's ``.grad.data`` before
    # ``step()``; SGD (lr 0.1, momentum, weight decay), one epoch of 300 batches of 8, a
    # test pass (``volatile=True``, without no_grad since torch 0.4), checkpoints. Written
    # for torch 0.3 (``loss.data[0]``): the package of programs_f.py is written beside it
    Program(
        SLIM,
        SLIM_AT,
        "main.py",
        args=(
            "--dataset", "cifar10", "-sr", "--s", "0.0001", "--arch", "vgg", "--depth", "11",
            "--batch-size", "8", "--test-batch-size", "64", "--epochs", "1", "--no-cuda",
            "--log-interval", "50",
        ),
        env=(("TV_SHIM_TRAIN", "2400"), ("TV_SHIM_TEST", "320")),
        shims=("torchvision",),
        setup=LEGACY_SETUP,
        steps=300,
        tags=("cnn",),
    ),
    # stochastic weight averaging (Izmailov et al. 2018; the SWAG authors' SWA script): a
    # LeNet-5 on MNIST's shapes (the torchvision shim's 1,600), SGD with momentum and
    # weight decay under the script's own schedule (0.05, annealed to the SWA rate 0.01 by
    # epoch 3), 6 epochs of 50 batches of 32; after epochs 3-6 a second LeNet-5, which no
    # optimizer holds, becomes the running average of the trained weights
    # (``moving_average``: ``p1.data *= 1 - a; p1.data += p2.data * a``), its BatchNorm
    # statistics are recomputed over the training data (``bn_update``; LeNet-5 has none)
    # and it is evaluated. ``.cuda()`` is a no-op (GW_CORPUS_CUDA_AS_CPU); the ``swag``
    # package is linked beside the script (our setup). Needs ``tabulate`` and
    # ``gpytorch`` 1.8 (the package's SWAG posterior imports its LazyTensors); the PIL shim
    # gives ``ImageOps`` and the resampling names, the torchvision shim
    # ``datasets.folder``, for the package's segmentation modules. Its table prints each
    # epoch's seconds in a column headed "time" (the header is printed at the first epoch
    # only): launch.py masks that column in the rows that follow the header
    Program(
        SWA,
        SWA_AT,
        "experiments/train/train.py",
        args=(
            "--dir", "./out", "--dataset", "MNIST", "--data_path", "./data",
            "--model", "LeNet5", "--epochs", "6", "--batch_size", "32", "--num_workers", "0",
            "--lr_init", "0.05", "--wd", "5e-4", "--swa", "--swa_start", "3",
            "--swa_lr", "0.01", "--eval_freq", "1", "--save_freq", "3",
        ),
        env=(("TV_SHIM_TRAIN", "1600"), ("TV_SHIM_TEST", "320"), ("GW_CORPUS_CUDA_AS_CPU", "1")),
        shims=("torchvision", "PIL"),
        setup=("ln -sfn ../../swag experiments/train/swag",),
        steps=300,
        tags=("cnn",),
    ),
]  # fmt: skip
