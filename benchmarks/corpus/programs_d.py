"""Programs of the corpus found for the held-out check (issue 40: correct programs nobody on
the team had seen, with unusual but legitimate techniques): sharpness-aware minimisation
(two forward/backward passes per step, a wrapper optimizer stepping an inner SGD, BatchNorm
statistics frozen on the second pass), a VQ-VAE (a custom autograd straight-through
estimator, a codebook trained only by its own loss term) and L-BFGS with a closure (up to 20
forward/backward passes inside one `optimizer.step`). Each runs unmodified at its pinned
commit on the CPU (see spec.py)."""

from __future__ import annotations

from spec import Program

SAM = "davda54/sam"
SAM_AT = "3c3afdbd71cff2462ec91c734b3d1170bd0f3707"
VQVAE = "ritheshkumar95/pytorch-vqvae"
VQVAE_AT = "8d123c0d043bebc8734d37785dd13dd20e7e5e0e"
TD3 = "sfujim/TD3"
TD3_AT = "34770ccdcb51df6f6c7d85c1ba7e40d71b940d16"
SAC = "pranz24/pytorch-soft-actor-critic"
SAC_AT = "c1805660b3961694be54079a355155a5cad492f5"

PROGRAMS: list[Program] = [
    # TD3 on the gym shim's Pendulum (gym 0.21 API: env.seed, 4-tuple step): twin critics
    # with target networks updated by Polyak averaging, target policy smoothing, the actor
    # and its target updated every second critic step (delayed policy updates); 200 random
    # steps, then 700 training iterations on batches of 64 (700 critic, 350 actor steps)
    Program(
        TD3,
        TD3_AT,
        "main.py",
        args=(
            "--env",
            "Pendulum-v1",
            "--start_timesteps",
            "200",
            "--max_timesteps",
            "900",
            "--eval_freq",
            "5000",
            "--batch_size",
            "64",
        ),
        env=(("GYM_SHIM_API", "0.21"),),
        shims=("gym",),
        tags=("rl-ac",),
    ),
    # SAM (adaptive, rho 2) around SGD with momentum, label smoothing, a WideResNet-10-1 on
    # CIFAR-10's shapes: 3 epochs of 100 batches of 8 (the step-wise schedule drops the
    # rate by 5x after each epoch)
    Program(
        SAM,
        SAM_AT,
        "example/train.py",
        args=(
            "--depth",
            "10",
            "--width_factor",
            "1",
            "--batch_size",
            "8",
            "--epochs",
            "3",
            "--threads",
            "0",
        ),
        env=(("TV_SHIM_TRAIN", "800"), ("TV_SHIM_TEST", "64")),
        shims=("torchvision",),
        tags=("resnet-bn",),
    ),
    # VQ-VAE on CIFAR-10's shapes (its MNIST path normalises one channel with three means,
    # which only the torchvision of 2018 let pass): a straight-through estimator (a custom
    # autograd.Function), codebook and commitment losses; one epoch of 300 batches of 8, 64
    # codes of size 32
    Program(
        VQVAE,
        VQVAE_AT,
        "vqvae.py",
        args=(
            "--dataset",
            "cifar10",
            "--data-folder",
            "./data",
            "--hidden-size",
            "32",
            "--k",
            "64",
            "--batch-size",
            "8",
            "--num-epochs",
            "1",
            "--num-workers",
            "0",
        ),
        env=(("TV_SHIM_TRAIN", "2400"), ("TV_SHIM_TEST", "64")),
        shims=("torchvision", "tensorboardX", "PIL"),
        tags=("vae",),
    ),
    # SAC on the gym shim's Pendulum: twin soft Q critics (one module, one optimizer), a
    # Gaussian policy, the entropy temperature learnt through log_alpha (a bare tensor with
    # its own Adam), a Polyak-averaged target critic; 200 random steps, then 700 updates of
    # each of the three optimizers on batches of 64; 10 evaluation episodes after episode 10
    Program(
        SAC,
        SAC_AT,
        "main.py",
        args=(
            "--env-name",
            "Pendulum-v1",
            "--automatic_entropy_tuning",
            "True",
            "--seed",
            "1",
            "--batch_size",
            "64",
            "--hidden_size",
            "64",
            "--num_steps",
            "900",
            "--start_steps",
            "200",
            "--replay_size",
            "10000",
        ),
        env=(("GYM_SHIM_API", "0.21"),),
        shims=("gym", "tensorboard"),
        tags=("rl-ac",),
    ),
]
