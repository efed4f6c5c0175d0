"""Programs of the corpus's second held-out round (issue 40: correct programs nobody on the
team had seen, chosen for what the checks had not met before, and run first at main as it
stood, 6af367e): adversarial training (a backward pass into the input perturbation before
the training pass on every step, and a learning rate set by hand on every batch from a
triangular schedule that starts at zero), a neural ODE (an adaptive solver calling the
model a varying number of times per step; with ``--adjoint`` the gradients are made by a
second ODE solve inside ``backward()``), word2vec skip-gram with sparse embeddings
(``nn.Embedding(sparse=True)`` under ``SparseAdam``: each step touches a few rows of two
large tables; the context table starts at exactly zero; a new optimizer and scheduler are
built at the start of each pass over the data, and the scheduler steps before the
optimizer) and a physics-informed network (its inputs are leaves that require a gradient;
the loss is built from `autograd.grad(..., create_graph=True)` of the output with respect
to them, up to second derivatives, with `backward(retain_graph=True)`). Each runs
unmodified at its pinned commit on the CPU (see spec.py)."""

from __future__ import annotations

from spec import Program

FAST_ADV = "locuslab/fast_adversarial"
FAST_ADV_AT = "54f728755e71857b632882ba6d6cef22f56e2172"
ODE = "rtqichen/torchdiffeq"
ODE_AT = "657943acefa826ef04c025ebeb1ff5e9d60dc268"
PINN = "osl202/PINNs"
PINN_AT = "e95a1199e63b7cc85509162ee1ca386a5e4c6614"
W2V = "Andras7/word2vec-pytorch"
W2V_AT = "36b93a503e8b3b5448abbc0e18f2a6bd3e017fc9"

#: the examples import the package from the repository root; the script's own folder is
#: the first entry of its path, so the package is linked in there (our setup, not theirs)
ODE_LINK = "ln -sfn ../torchdiffeq examples/torchdiffeq"
ODE_ARGS = ("--niters", "320", "--test_freq", "40", "--data_size", "400")

PROGRAMS: list[Program] = [
    # "Fast is better than free" FGSM adversarial training on MNIST's shapes: per batch, a
    # random start, one signed-gradient step on the perturbation (a backward pass that also
    # fills the model's gradients, cleared by zero_grad before the training pass), then
    # the training step on the perturbed batch; Adam with the learning rate written into
    # the param group on every batch from a cyclic schedule 0 -> 5e-3 -> 0 over the run;
    # written for one GPU (`.cuda()` calls), run on the CPU by the seed shim's
    # GW_CORPUS_CUDA_AS_CPU; 5 epochs of 64 batches of 100
    Program(
        FAST_ADV,
        FAST_ADV_AT,
        "MNIST/train_mnist.py",
        args=("--epochs", "5", "--fname", "mnist_model.pt"),
        env=(("TV_SHIM_TRAIN", "6400"), ("TV_SHIM_TEST", "100"), ("GW_CORPUS_CUDA_AS_CPU", "1")),
        shims=("torchvision",),
        tags=("cnn",),
    ),
    # A neural ODE fitting a spiral's dynamics (dopri5, adaptive steps), RMSprop, 320
    # iterations on batches of 20 sub-trajectories of 10 points, an evaluation on the
    # whole trajectory under no_grad every 40 iterations
    Program(
        ODE,
        ODE_AT,
        "examples/ode_demo.py",
        args=ODE_ARGS,
        setup=(ODE_LINK,),
        steps=320,
    ),
    # the same with the adjoint method: backward() solves the adjoint ODE backwards in time
    # and makes the parameters' gradients with autograd.grad inside that solve
    Program(
        ODE,
        ODE_AT,
        "examples/ode_demo.py",
        args=(*ODE_ARGS, "--adjoint"),
        setup=(ODE_LINK,),
        steps=320,
        variant="adjoint",
    ),
    # word2vec skip-gram with negative sampling on 1.8 MB of text (the Python standard
    # library's own sources, whitespace-split), its script's own `__main__` (input.txt,
    # 3 passes, batches of 32 lines, each pass with an optimizer of its own making over 300
    # steps); the script imports its package by name from inside
    # it, so the package folder is linked into itself (our setup)
    Program(
        W2V,
        W2V_AT,
        "word2vec/trainer.py",
        setup=(
            "$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py text input.txt --chars 1800000",
            "ln -sfn . word2vec/word2vec",
        ),
        cwd=".",
        steps=300,
    ),
    # a physics-informed network for Burgers' equation: four forward passes a step (the
    # collocation points, the initial condition, two boundaries), the PDE residual from
    # first and second derivatives of the output with respect to the inputs, Adam; the
    # script runs 10,000 iterations with no option for fewer, so the seed shim's step cap
    # stops it after 400 (before its plot)
    Program(
        PINN,
        PINN_AT,
        "train_pinn.py",
        env=(("GW_CORPUS_MAX_STEPS", "400"),),
        shims=("matplotlib",),
        steps=400,
    ),
]
