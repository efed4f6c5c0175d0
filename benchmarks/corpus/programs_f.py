"""Programs of the corpus's third held-out round (public programs nobody on the team had
run, each run first under `gradwatch run` at main as it stood, a4426ec): iterative
magnitude pruning for the lottery-ticket hypothesis (numpy masks multiplied into the weights
through ``param.data = ...``, the gradients of pruned weights overwritten with zeros through
``p.grad.data = ...`` between ``backward()`` and ``step()``, the weights rewound to their
initial values and a new Adam built after each pruning round) and mixup (a loss against two
label sets of one batch mixed with a Beta-distributed weight). Each runs unmodified at its
pinned commit on the CPU (see spec.py)."""

from __future__ import annotations

import os
import shlex

from spec import Program

LTH = "rahulvigneswaran/Lottery-Ticket-Hypothesis-in-Pytorch"
LTH_AT = "34a8c9678406a1c7dd0fec4c9f0d25d017be55fb"

LTH_ARGS = ("--dataset", "mnist", "--arch_type", "fc1", "--prune_type", "lt")
LTH_ARGS += ("--prune_percent", "20", "--prune_iterations", "4", "--end_iter", "4")
#: the script imports seaborn only for ``sns.set_style('darkgrid')`` before its plots (which
#: the matplotlib shim does not draw); seaborn needs the real matplotlib, so a stub module
#: beside the script stands in for it (our setup, not theirs)
SEABORN_STUB = "printf 'def set_style(*args, **kwargs):\\n    pass\\n' > seaborn.py"

MIXUP = "facebookresearch/mixup-cifar10"
MIXUP_AT = "eaff31ab397a90fbc0a4aac71fb5311144b3608b"

#: the script was written for torch 0.3, where a loss was a 1-element tensor and
#: ``loss.data[0]`` its number; since torch 0.4 a loss is 0-dim and indexing it raises. A
#: package written beside the script (first on its path) makes ``t[0]`` of a 0-dim tensor
#: its Python number, as torch 0.3 gave, and is then the torchvision shim (it takes the
#: shim's folder as its own); every other indexing goes to torch as it is (ours, not theirs)
LEGACY_TORCHVISION = '''"""gradwatch corpus: torch 0.3's loss.data[0], then the torchvision shim."""
import os
import sys

import torch

_getitem = torch.Tensor.__getitem__


def _legacy_getitem(self, index):
    if type(index) is int and index == 0 and self.dim() == 0:
        return self.item()
    return _getitem(self, index)


torch.Tensor.__getitem__ = _legacy_getitem

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _shim = os.path.join(os.path.abspath(_entry or os.curdir), "torchvision")
    if _shim != _here and os.path.isfile(os.path.join(_shim, "__init__.py")):
        break
else:
    raise ImportError("no torchvision shim on the path")
__path__[:] = [_shim]
__file__ = os.path.join(_shim, "__init__.py")
with open(__file__) as _f:
    exec(compile(_f.read(), __file__, "exec"))
'''
#: its utils.py reads the terminal's size at import (``os.popen('stty size')``), which
#: gives nothing without a terminal; a ``stty`` of ours on the path answers 24 rows, 80
#: columns
MIXUP_SETUP = (
    "mkdir -p torchvision && printf '%s' "
    f"{shlex.quote(LEGACY_TORCHVISION)} > torchvision/__init__.py",
    "mkdir -p .corpus-bin && printf '#!/bin/sh\\necho 24 80\\n' > .corpus-bin/stty"
    " && chmod +x .corpus-bin/stty",
)
#: the working directory is the tree's root, so the relative entry finds our stty
MIXUP_PATH = os.pathsep.join((".corpus-bin", os.environ.get("PATH", "/usr/bin:/bin")))

PROGRAMS: list[Program] = [
    # the lottery ticket: a 784-300-100-10 MLP on MNIST's shapes (the torchvision shim's
    # 6,000), Adam with weight decay; 4 rounds (the first unpruned, then 20 % of each
    # weight matrix's remaining weights pruned by magnitude and the rest rewound to their
    # initial values, a new Adam each round) of 4 epochs of 100 batches of 60: 400 steps
    # per optimizer, 1,600 in all; the test set evaluated before every epoch
    Program(
        LTH,
        LTH_AT,
        "main.py",
        args=LTH_ARGS,
        env=(("TV_SHIM_TRAIN", "6000"), ("TV_SHIM_TEST", "600")),
        shims=("torchvision", "tensorboardX", "matplotlib"),
        setup=(SEABORN_STUB,),
        steps=400,
    ),
    # mixup: LeNet-5 on CIFAR-10's shapes (the torchvision shim's 6,400, random crops and
    # flips), every batch mixed with a shuffled copy of itself by a Beta(1, 1) weight and
    # the loss the same mixture of two cross-entropies against the two label sets; SGD
    # (momentum 0.9, weight decay 1e-4); 4 epochs of 100 batches of 64, each followed by a
    # test pass (without no_grad: `volatile=True` has had no effect since torch 0.4). Its
    # progress bar prints elapsed times as one word ("1s674ms", "987ms"): launch.py masks
    # each as one token, since the two modes pass a second at different batches
    Program(
        MIXUP,
        MIXUP_AT,
        "train.py",
        args=("--model", "LeNet", "--batch-size", "64", "--epoch", "4"),
        env=(("TV_SHIM_TRAIN", "6400"), ("TV_SHIM_TEST", "500"), ("PATH", MIXUP_PATH)),
        shims=("torchvision",),
        setup=MIXUP_SETUP,
        steps=400,
    ),
]

OPACUS = "pytorch/opacus"
OPACUS_AT = "4d0ebc84613d214fbfd37fbfd1390e3747a625ce"
CLEANRL = "vwxyzjn/cleanrl"
CLEANRL_AT = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"
PYGCN = "tkipf/pygcn"
PYGCN_AT = "1600b5b748b3976413d1e307540ccc62605b4d6d"
IGNITE = "pytorch/ignite"
IGNITE_AT = "de08e799cfb55a6cf4aa778575d6bad725385453"

#: cleanrl's scripts import ``cleanrl_utils`` from the repository root; the script's own
#: folder is first on its path, so the package is linked in there (our setup)
CLEANRL_LINK = "ln -sfn ../cleanrl_utils cleanrl/cleanrl_utils"
CLEANRL_COMMON = ("--seed", "1", "--no-track", "--no-capture-video")


def _cleanrl(script: str, tags: tuple[str, ...], steps: int, *args: str) -> Program:
    return Program(
        CLEANRL,
        CLEANRL_AT,
        f"cleanrl/{script}.py",
        args=(*CLEANRL_COMMON, *args),
        shims=("tensorboard",),
        setup=(CLEANRL_LINK,),
        steps=steps,
        tags=tags,
    )


PROGRAMS += [
    # DP-SGD (Opacus): the model wrapped in a GradSampleModule (per-sample gradients by
    # hooks), the SGD optimizer in a DPOptimizer (each sample's gradient clipped to norm 1,
    # Gaussian noise added to the summed gradient in step()), the DataLoader replaced by a
    # Poisson-sampling one (batch sizes vary around 16); 320 batches of MNIST's shapes. The
    # package of the pinned tree is linked beside the example (our setup)
    Program(
        OPACUS,
        OPACUS_AT,
        "examples/mnist.py",
        args=("--device", "cpu", "-b", "16", "-n", "1", "--data-root", "./mnist"),
        env=(("TV_SHIM_TRAIN", "5120"), ("TV_SHIM_TEST", "256")),
        shims=("torchvision",),
        setup=("ln -sfn ../opacus examples/opacus",),
        steps=300,
        tags=("cnn",),
    ),
    # cleanrl's single-file RL (gymnasium 0.29, classic control): PPO on CartPole (4
    # environments, 20 rollouts of 128 steps, 4 epochs of 4 minibatches each: 320 updates,
    # the learning rate annealed by hand in the param group), DQN (a target network copied
    # every 500 steps, a replay buffer from stable-baselines3; 3,500 updates), SAC on
    # Pendulum (twin critics, a policy updated every other step, entropy tuning: 999
    # critic updates, one per environment step after the first 500 but the last)
    _cleanrl(
        "ppo", ("rl-ppo",), 320,
        "--total-timesteps", "10240", "--num-envs", "4", "--num-steps", "128",
    ),
    _cleanrl(
        "dqn", ("rl-dqn",), 3000,
        "--total-timesteps", "4000", "--learning-starts", "500", "--train-frequency", "1",
    ),
    _cleanrl(
        "sac_continuous_action", ("rl-ac",), 900,
        "--env-id", "Pendulum-v1", "--total-timesteps", "1500", "--learning-starts", "500",
    ),
    # the original graph convolutional network: full-batch training on one fixed graph (the
    # same input at every step, by design), Adam with weight decay, dropout, an evaluation
    # forward in eval mode with gradients on after every step; Cora's format written by the
    # corpus's synthetic graph (the mirror lacks the features file); the script imports its
    # package by name from inside it, so the folder is linked into itself (our setup)
    Program(
        PYGCN,
        PYGCN_AT,
        "pygcn/train.py",
        args=("--epochs", "300"),
        setup=(
            "$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py cora data/cora",
            "ln -sfn . pygcn/pygcn",
        ),
        steps=300,
        tags=("gnn",),
    ),
    # PyTorch-Ignite: the loop is the library's (create_supervised_trainer's Engine), the
    # script only attaches handlers; 320 batches of 16 of MNIST's shapes, SGD with
    # momentum; the package of the pinned tree is linked beside the example (our setup)
    Program(
        IGNITE,
        IGNITE_AT,
        "examples/mnist/mnist.py",
        args=("--batch_size", "16", "--epochs", "1", "--log_interval", "50"),
        env=(("TV_SHIM_TRAIN", "5120"), ("TV_SHIM_TEST", "256")),
        shims=("torchvision",),
        setup=("ln -sfn ../../ignite examples/mnist/ignite",),
        steps=300,
        tags=("cnn",),
    ),
]  # fmt: skip
