"""Programs of the corpus's sixth held-out round (public programs nobody on the team had run,
each run first under `gradwatch run` as the collector stood at HEAD 189679e): temporal
convolutional networks (Bai, Kolter & Koltun 2018: stacks of dilated causal 1-D
convolutions under ``torch.nn.utils.weight_norm``, so that every convolution's weight is
recomputed in a forward pre-hook from two parameters, a direction ``weight_v`` and a norm
``weight_g``, with residual blocks) on two synthetic sequence tasks made in code, the adding
problem (a regression on the last time step, MSE, Adam) and the copy-memory task (a
cross-entropy at every time step, RMSprop, and a gradient-norm clip the script calls
between ``zero_grad()`` and ``backward()``, where there is nothing to clip), and a Neural
Turing Machine on the copy task (an LSTM controller with a learned initial state, one read
and one write head addressing a 2-D external memory by content and location: cosine
similarity, interpolation with the previous weighting, a circular shift by a 1-D
convolution and sharpening; outputs written one time step at a time into a zero tensor,
``nn.BCELoss`` on sigmoid outputs, every gradient clamped to [-10, 10] through ``.data``,
RMSprop with momentum; random bit sequences of random length). Each runs unmodified at its
pinned commit on the CPU (see spec.py)."""

from __future__ import annotations

import shlex

from spec import Program

TCN = "locuslab/TCN"
TCN_AT = "2f8c2b817050206397458dfd1f5a25ce8a32fe65"
NTM = "loudinthecloud/pytorch-ntm"
NTM_AT = "3c64937cb075e737528ff7ecf02b2c1c6d8347a1"

#: pytorch-ntm declares its parameters with ``attrib(default=..., convert=int)``, a keyword
#: attrs renamed ``converter`` and removed in 19.2 (the venv has 26.1): a package ``attr``
#: beside the script puts the installed attrs in its own place with ``attrib`` (and its
#: aliases ``ib`` / ``attr``) taking ``convert`` as ``converter`` (ours, not theirs)
LEGACY_ATTR = '''"""gradwatch corpus: attrib(convert=...) of attrs < 19.2, then attr itself."""
import importlib
import os
import sys

_here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_saved = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
del sys.modules[__name__]
try:
    _real = importlib.import_module("attr")
finally:
    sys.path[:] = _saved
_attrib = _real.attrib


def attrib(*args, convert=None, **kwargs):
    if convert is not None:
        kwargs["converter"] = convert
    return _attrib(*args, **kwargs)


_real.attrib = _real.ib = _real.attr = attrib
sys.modules[__name__] = _real
'''
NTM_SETUP = (f"mkdir -p attr && printf '%s' {shlex.quote(LEGACY_ATTR)} > attr/__init__.py",)

PROGRAMS: list[Program] = [
    # a temporal convolutional network on the adding problem (Bai et al. 2018): 4 residual
    # blocks of two dilated causal 1-D convolutions of 16 channels, kernel 4, dilations 1,
    # 2, 4, 8 (a receptive field of 91 steps over sequences of 50), each convolution under
    # ``weight_norm`` (``weight_g`` and ``weight_v`` are the parameters; ``weight`` is
    # recomputed before every forward), the causal padding chomped off, a 1x1 convolution
    # on the first block's residual; a linear head on the last time step regresses the sum
    # of the two numbers marked in a second channel; MSE, Adam at 4e-3. One epoch of the
    # script's 50,000 synthetic sequences (made in code: torch's ``rand`` seeded by the
    # script, the marked positions from numpy, which it does not seed; the seed shim does)
    # in 313 batches of 160, then the MSE on 1,000 test sequences. ``--cuda`` is a
    # ``store_false`` flag: passing it turns CUDA off
    Program(
        TCN,
        TCN_AT,
        "TCN/adding_problem/add_test.py",
        args=(
            "--cuda", "--batch_size", "160", "--epochs", "1", "--seq_len", "50",
            "--ksize", "4", "--levels", "4", "--nhid", "16", "--log-interval", "50",
        ),
        steps=300,
        tags=("cnn",),
    ),
    # the same network (4 blocks of 10 channels, kernel 4) on the copy-memory task: 10
    # digits, 40 blanks, a marker, and the digits to be recalled in the last 10 of 60 steps;
    # a cross-entropy over 10 classes at every time step, RMSprop at 5e-4. The script calls
    # ``clip_grad_norm_(model.parameters(), 1.0)`` after ``zero_grad()`` and before
    # ``loss.backward()``, so it clips nothing and every step applies the unclipped gradient
    # (a defect of the program that gradwatch reports: see README, round 6). One epoch of
    # 10,000 sequences (numpy's ``randint``) in 313 batches of 32, then the test set
    Program(
        TCN,
        TCN_AT,
        "TCN/copy_memory/copymem_test.py",
        args=(
            "--cuda", "--batch_size", "32", "--epochs", "1", "--blank_len", "40",
            "--seq_len", "10", "--ksize", "4", "--levels", "4", "--nhid", "10",
            "--log-interval", "50",
        ),
        steps=300,
        tags=("cnn",),
    ),
    # a Neural Turing Machine (Graves et al. 2014) on the copy task: an LSTM controller of
    # 50 with a learned initial state (``lstm_h_bias`` / ``lstm_c_bias`` parameters cloned
    # per sequence), one read and one write head over a 32x10 memory reset from a fixed
    # buffer per sequence (content addressing by cosine similarity and a softmax, a gate with
    # the previous weighting, a circular shift by ``conv1d`` per batch element, sharpening;
    # erase and add on write), the sequence fed one time step at a time and the outputs
    # written one step at a time into a zero tensor (``y_out[i], _ = net()``); ``BCELoss``
    # on sigmoid outputs, every gradient clamped to [-10, 10] through ``p.grad.data``,
    # RMSprop at 1e-4 with momentum 0.9. 300 batches of 4 random 8-bit sequences of 1-10
    # steps (``random`` and numpy, seeded by the script), no checkpoints. Its ``attrs``
    # parameters need the ``attr`` package of the setup (``convert=``); needs ``argcomplete``
    # (pip)
    Program(
        NTM,
        NTM_AT,
        "train.py",
        args=(
            "--task", "copy", "-pnum_batches=300", "-pbatch_size=4",
            "-pcontroller_size=50", "-pmemory_n=32", "-pmemory_m=10",
            "-psequence_max_len=10", "--report-interval", "50",
            "--checkpoint-interval", "0",
        ),
        setup=NTM_SETUP,
        steps=300,
    ),
]  # fmt: skip
