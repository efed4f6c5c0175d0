"""Programs of the corpus's fifth held-out round (public programs nobody on the team had run,
each run first under `gradwatch run` as the collector stood at HEAD aaab56f): a capsule
network (dynamic routing by agreement: three routing iterations in every forward pass, the
coupling logits updated from a detached copy of the predictions so that only the last
iteration carries a gradient; a margin loss plus a masked reconstruction), a character-level
GRU unrolled by hand one character at a time with the per-character losses summed into one
backward pass, neural collaborative filtering (NeuMF: user and item embeddings through a
generalised matrix factorisation and an MLP branch, implicit feedback with negative items
resampled every epoch, a binary cross-entropy on logits, hit ratio and NDCG at 10),
domain-adversarial training through a gradient reversal layer (a custom
``autograd.Function`` that negates the gradient flowing from a domain discriminator into the
feature extractor) and TRPO with no torch optimizer (conjugate gradients on Fisher-vector
products from ``torch.autograd.grad``, a line search writing the policy's ``.data``, the
value network fitted by SciPy's L-BFGS-B). Each runs unmodified at its pinned commit on the
CPU (see spec.py). A Kolmogorov-Arnold network (Blealtan/efficient-kan) was tried and left
out: it is not deterministic without gradwatch (README, round 5)."""

from __future__ import annotations

import shlex

from programs_f import LEGACY_TORCHVISION
from spec import Program

CAPS = "XifengGuo/CapsNet-Pytorch"
CAPS_AT = "8a5a3572d91eb9479425168d3d565eb02e78be46"
CHARRNN = "spro/char-rnn.pytorch"
CHARRNN_AT = "282bcb6b15ab3929d6a588b455cfc0f19f32add4"
DANN = "jvanvugt/pytorch-domain-adaptation"
DANN_AT = "be63aadc18821d6b19c75df51f264ff08370a765"
TRPO = "ikostrikov/pytorch-trpo"
TRPO_AT = "e200eb8a23b3c7941a0091efb9750dafa4b23cbb"
NCF = "guoyang9/NCF"
NCF_AT = "89ff06ffcd2bca6bb773b54925265c208a28d318"

#: written for torch 0.3 (``loss.data[0]``): the package of programs_f.py beside the script
LEGACY_SETUP = (
    "mkdir -p torchvision && printf '%s' "
    f"{shlex.quote(LEGACY_TORCHVISION)} > torchvision/__init__.py",
)

#: char-rnn.pytorch returns ``loss.data[0] / chunk_len`` from ``train`` (torch 0.3) and
#: imports no torchvision; its ``helpers`` imports ``unidecode``, so a package of that name
#: beside the script makes ``t[0]`` of a 0-dim tensor its number (as programs_f.py's does)
#: and then puts the installed unidecode in its place (ours, not theirs). (Not ``tqdm``,
#: which the script imports too: the seed shim's ``import torch`` imports tqdm before the
#: script's folder is on the path.)
LEGACY_UNIDECODE = '''"""gradwatch corpus: torch 0.3's loss.data[0], then unidecode itself."""
import importlib
import os
import sys

import torch

_getitem = torch.Tensor.__getitem__


def _legacy_getitem(self, index):
    if type(index) is int and index == 0 and self.dim() == 0:
        return self.item()
    return _getitem(self, index)


torch.Tensor.__getitem__ = _legacy_getitem

_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
del sys.modules[__name__]
try:
    _real = importlib.import_module("unidecode")
finally:
    sys.path[:] = _saved
sys.modules[__name__] = _real
'''
#: the text: the Python standard library's ``argparse`` and ``json`` sources (about 110 kB)
CHARRNN_SETUP = (
    f"mkdir -p unidecode && printf '%s' {shlex.quote(LEGACY_UNIDECODE)} > unidecode/__init__.py",
    '$PYTHON -c "import argparse, json.decoder, json.encoder, inspect;'
    " open('input.txt', 'w').write(''.join(inspect.getsource(m) for m in"
    ' (argparse, json.decoder, json.encoder)))"',
)

#: NCF's ``config.py`` reads MovieLens-1M's files (the NCF authors' split: one training
#: rating per line, and per user the held-out item with 99 sampled negatives) from the
#: absolute folder ``/home/share/guoyangyang/recommendation/NCF-Data/``; setup writes a
#: synthetic stand-in there in that format: 120 users in 4 taste groups, 400 items in 4
#: blocks, each user's 12 training items drawn 80 % from the group's block, one held-out
#: item from the block and 99 negatives the user never rated (seeded; ours, not theirs)
NCF_DATA = r"""
import os, random
rng = random.Random(0)
root = '/home/share/guoyangyang/recommendation/NCF-Data/'
os.makedirs(root, exist_ok=True)
users, items, groups = 120, 400, 4
block = items // groups
train, test = [], []
for u in range(users):
    g = u % groups
    own = list(range(g * block, (g + 1) * block))
    seen = set()
    while len(seen) < 13:
        seen.add(rng.choice(own) if rng.random() < 0.8 else rng.randrange(items))
    seen = sorted(seen)
    held = next(i for i in seen if g * block <= i < (g + 1) * block)
    for i in seen:
        if i != held:
            train.append((u, i))
    negs = rng.sample([i for i in range(items) if i not in seen], 99)
    test.append((u, held, negs))
with open(root + 'ml-1m.train.rating', 'w') as f:
    for u, i in train:
        f.write('%d\t%d\t5\t978300760\n' % (u, i))
with open(root + 'ml-1m.test.rating', 'w') as f:
    for u, i, _ in test:
        f.write('%d\t%d\t5\t978300760\n' % (u, i))
with open(root + 'ml-1m.test.negative', 'w') as f:
    for u, i, negs in test:
        f.write('(%d,%d)\t' % (u, i) + '\t'.join(map(str, negs)) + '\n')
"""
NCF_SETUP = (f"$PYTHON -c {shlex.quote(NCF_DATA)}",)

#: RevGrad's target domain, MNIST-M, is made on the fly by blending each MNIST digit with a
#: random 28x28 patch of a BSDS500 photograph read with OpenCV from ``config.DATA_DIR`` (the
#: absolute ``/home/joris/data``). Setup writes 24 seeded stand-in "photographs" there
#: (96x96 RGB, smooth colour fields plus stripes and noise, PNG data under BSDS500's
#: ``.jpg`` names, read by the corpus's ``cv2`` shim), then trains the source model with
#: the repository's own ``train_source.py`` (see DANN_SOURCE; 2 epochs of 60 batches of 32 of the
#: torchvision shim's MNIST, Adam; the best by validation accuracy saved as
#: ``trained_models/source.pt``), which RevGrad starts from (our setup)
DANN_IMAGES = r"""
import os
import numpy as np
from torchvision.io import write_png
root = '/home/joris/data/BSR/BSDS500/data/images/train'
os.makedirs(root, exist_ok=True)
rng = np.random.RandomState(0)
yy, xx = np.mgrid[0:96, 0:96] / 96.0
for k in range(24):
    img = np.zeros((96, 96, 3))
    for c in range(3):
        a, b, f, p = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(2, 12), rng.uniform(0, 6.3)
        wave = np.sin(f * (a * xx + b * yy) * 3.1416 + p)
        img[:, :, c] = 0.5 + 0.3 * wave + 0.2 * (xx * a - yy * b)
    img += rng.normal(0, 0.08, img.shape)
    path = os.path.join(root, '%03d.jpg' % k)
    write_png((np.clip(img, 0, 1) * 255).astype(np.uint8), path)
"""
#: ``train_source.py`` builds ``ReduceLROnPlateau(optim, patience=1, verbose=True)``, an
#: argument torch 2.13 no longer takes: it is run through ``runpy`` with the scheduler
#: taking and dropping ``verbose`` (ours, not theirs)
DANN_SOURCE = (
    "import sys, runpy, torch.optim.lr_scheduler as s\n"
    "_init = s.ReduceLROnPlateau.__init__\n"
    "s.ReduceLROnPlateau.__init__ = lambda self, *a, verbose=None, **k: _init(self, *a, **k)\n"
    "sys.argv = ['train_source.py', '--epochs', '2', '--batch-size', '32']\n"
    "runpy.run_path('train_source.py', run_name='__main__')\n"
)
DANN_SETUP = (
    f"PYTHONPATH=$CORPUS_SHIMS/torchvision $PYTHON -c {shlex.quote(DANN_IMAGES)}",
    "TV_SHIM_TRAIN=2400 TV_SHIM_TEST=320 GW_CORPUS_SEED=0 PYTHONHASHSEED=0 OMP_NUM_THREADS=1"
    " PYTHONPATH=$CORPUS_SHIMS/torchvision:$CORPUS_SHIMS/PIL:$CORPUS_SHIMS/cv2:$CORPUS_SHIMS/_seed"
    " $PYTHON -c " + shlex.quote(DANN_SOURCE) + " > source.log 2>&1",
)

PROGRAMS: list[Program] = [
    # a capsule network (Sabour et al. 2017, "Dynamic Routing Between Capsules"): a 9x9
    # convolution, primary capsules (a strided 9x9 convolution reshaped to 1,152 8-D
    # capsules, squashed), 10 16-D digit capsules by 3 iterations of routing by agreement
    # (coupling logits from a detached copy of the predictions on the first two; only the
    # last iteration is differentiated), a margin loss on the capsule lengths plus 0.392 x
    # the reconstruction MSE of a decoder fed the true class's capsule (the others masked);
    # Adam at 1e-3 with ExponentialLR stepped at the top of each epoch; one epoch of 300
    # batches of 8 of MNIST's shapes (the torchvision shim's 2,400, random 2-pixel shifts),
    # a test pass, checkpoints. ``.cuda()`` is a no-op (GW_CORPUS_CUDA_AS_CPU); written for
    # torch 0.3 (``loss.data[0]``, ``volatile=True``)
    Program(
        CAPS,
        CAPS_AT,
        "capsulenet.py",
        args=(
            "--epochs", "1", "--batch_size", "8", "--data_dir", "./data",
            "--save_dir", "./result",
        ),
        env=(("TV_SHIM_TRAIN", "2400"), ("TV_SHIM_TEST", "80"), ("GW_CORPUS_CUDA_AS_CPU", "1")),
        shims=("torchvision",),
        setup=LEGACY_SETUP,
        steps=300,
        tags=("cnn",),
    ),
    # a character-level language model (spro's char-rnn): an embedding, a 2-layer GRU of
    # 64 and a linear decoder over the 100 printable characters, unrolled by hand one
    # character at a time over a random 50-character chunk per sequence (hidden state
    # zeroed per batch, so no state crosses batches), the 50 per-character cross-entropies
    # summed into one loss (50 x the mean), Adam at 0.01; 300 "epochs" of one batch of 16
    # chunks, 100 characters sampled every 100. Needs ``unidecode`` (pip)
    Program(
        CHARRNN,
        CHARRNN_AT,
        "train.py",
        args=(
            "input.txt", "--model", "gru", "--n_epochs", "300", "--print_every", "100",
            "--hidden_size", "64", "--n_layers", "2", "--chunk_len", "50",
            "--batch_size", "16",
        ),
        setup=CHARRNN_SETUP,
        steps=300,
        tags=("rnn-lm",),
    ),
    # neural collaborative filtering (He et al. 2017, NeuMF trained end to end): user and
    # item embeddings (32-D for the GMF branch, 128-D for a 3-layer MLP tower), their
    # element-wise product and the tower's output concatenated into one logit;
    # BCEWithLogitsLoss on implicit feedback, each epoch's 4 negatives per positive
    # resampled (``ng_sample``); Adam at 1e-3; 3 epochs of 103 batches of 64 (the
    # synthetic stand-in's 1,320 ratings x 5), after each the hit ratio and NDCG at 10 over
    # each user's held-out item and 99 negatives, and the best model saved. The loaders
    # use 4 worker processes. ``.cuda()`` is a no-op (GW_CORPUS_CUDA_AS_CPU). Needs pandas,
    # scipy and the tensorboardX shim (imported, unused)
    Program(
        NCF,
        NCF_AT,
        "main.py",
        args=("--batch_size", "64", "--epochs", "3", "--gpu", "-1"),
        env=(("GW_CORPUS_CUDA_AS_CPU", "1"),),
        shims=("tensorboardX",),
        setup=NCF_SETUP,
        steps=300,
    ),
    # domain-adversarial training (RevGrad / DANN, Ganin & Lempitsky 2015): the source
    # model's feature extractor and classifier, plus a domain discriminator behind a
    # gradient reversal layer (a custom ``autograd.Function``: the identity forward, the
    # gradient times -1 backward), all in one Adam; each step half a batch of MNIST
    # (labelled, 3 channels) and half of MNIST-M (unlabelled), a cross-entropy on the
    # source labels plus a binary cross-entropy on the domain, one backward pass; the
    # feature extractor is pushed to make the domains indistinguishable. One epoch of 300
    # steps of 8 + 8 (the torchvision shim's 2,400 + 2,400), the model saved. Needs the
    # cv2 shim and the PIL shim's ``fromarray``
    Program(
        DANN,
        DANN_AT,
        "revgrad.py",
        args=("trained_models/source.pt", "--batch-size", "16", "--epochs", "1"),
        env=(("TV_SHIM_TRAIN", "2400"), ("TV_SHIM_TEST", "2400")),
        shims=("torchvision", "PIL", "cv2"),
        setup=DANN_SETUP,
        steps=300,
        tags=("cnn",),
    ),
    # trust-region policy optimisation (TRPO, Schulman et al. 2015) with no torch optimizer:
    # the policy's step is computed from ``torch.autograd.grad`` (the surrogate's gradient,
    # then Fisher-vector products as a gradient of a gradient, ``create_graph=True``, inside
    # 10 conjugate-gradient iterations), then a backtracking line search writes candidate
    # parameters into the policy by hand (``set_flat_params_to``: ``param.data.copy_``);
    # the value network is fitted by SciPy's L-BFGS-B (``fmin_l_bfgs_b``, 25 iterations)
    # whose objective writes the proposed parameters into the network, zeroes and fills
    # ``.grad`` by ``backward()`` and hands the flat gradient back. Float64 throughout
    # (``set_default_tensor_type``), running observation normalisation. Pendulum-v1 from the
    # gym shim (the gym 0.21 API); batches of at least 1,000 environment steps (6
    # episodes); the shim ends the program at the 73rd episode's reset (12 policy updates)
    Program(
        TRPO,
        TRPO_AT,
        "main.py",
        args=("--env-name", "Pendulum-v1", "--batch-size", "1000"),
        env=(("GYM_SHIM_API", "0.21"), ("GYM_SHIM_MAX_EPISODES", "72")),
        shims=("gym",),
        steps=300,
        tags=("rl-pg",),
    ),
]  # fmt: skip
