"""Reinforcement-learning, language-model, graph, Lightning, Hugging Face `Trainer`, LoRA,
mixture-of-experts and meta-learning programs of the corpus (see spec.py). Each runs
unmodified at its pinned commit; the `gym` shim stands in for gym/gymnasium's classic-control
environments (its episode cap ends the RL scripts, which loop over 10,000 episodes with no
flag), `tensorboard` for logging they cannot skip, `textdata` writes the text and graph
files they read, and `requests_cora` serves a synthetic Cora archive to a script that
downloads it on every run."""

from __future__ import annotations

from spec import Program

MINIMALRL = "seungeunrho/minimalRL"
MINIMALRL_AT = "c8efed8481e3cd40e9739cfde220a55522555b57"
MAKEMORE = "karpathy/makemore"
MAKEMORE_AT = "988aa59e4d8fefa526d06f3b453ad116258398d4"
EXAMPLES = "pytorch/examples"
EXAMPLES_AT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"

NANOGPT = "karpathy/nanoGPT"
NANOGPT_AT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
LORA_NANOGPT = "cccntu/LoRAnanoGPT"  # nanoGPT with minLoRA (its author's fork)
LORA_NANOGPT_AT = "e18d9f2532b7992e9cef379e18e22a8e47cb8e4c"
MINLORA_AT = "d47a4c93df87540bb396172cfac1f3246e7db5f9"  # cccntu/minLoRA, its dependency
MINGPT = "karpathy/minGPT"
MINGPT_AT = "37baab71b9abea1b76ab957409a1cc2fbfba8a26"
LIGHTNING = "Lightning-AI/pytorch-lightning"
LIGHTNING_AT = "7f0c3436cd3f6ad3753125672024fc415cbcb414"
MAML = "JosephKJ/PyTorch-MAML-and-Reptile"
MAML_AT = "00d20bc5845a32bf2c98c4d1f46044cbb867a1c4"
MOE = "davidmrau/mixture-of-experts"
MOE_AT = "f662999727109357c42074997e9a6cd72806f668"

DATA = "$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py"
MIRRORS = "${GW_CORPUS_MIRRORS:-/work/.mirror}"


def _rl(script: str, episodes: int, tags: tuple[str, ...], seeds: tuple[int, ...] = (0, 1, 2)):
    """A minimalRL script, ended by the gym shim after ``episodes`` episodes."""
    return Program(
        MINIMALRL,
        MINIMALRL_AT,
        script,
        shims=("gym",),
        env=(("GYM_SHIM_MAX_EPISODES", str(episodes)),),
        seeds=seeds,
        tags=tags,
    )


def _makemore(kind: str, tags: tuple[str, ...], seeds: tuple[int, ...] = (0,)) -> Program:
    return Program(
        MAKEMORE,
        MAKEMORE_AT,
        "makemore.py",
        args=(
            "-i",
            "names.txt",
            "-o",
            f"out-{kind}",
            "--type",
            kind,
            "--max-steps",
            "300",
            "--num-workers",
            "0",
        ),
        shims=("tensorboard",),
        seeds=seeds,
        tags=tags,
        variant=kind,
    )


CHAR_DATA = f"{DATA} nanogpt-char data/shakespeare_char"
# nanoGPT's README "baby GPT" for a CPU, smaller still, 300 iterations (it runs 0..max_iters)
NANO = (
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=10",
    "--eval_interval=100",
    "--log_interval=50",
    "--block_size=64",
    "--batch_size=8",
    "--n_layer=2",
    "--n_head=4",
    "--n_embd=64",
    "--max_iters=300",
    "--lr_decay_iters=300",
    "--dropout=0.0",
)
WIKITEXT = f"{DATA} wikitext word_language_model/data/wikitext-2 --train-words 240000"
WLM_SMALL = ("--emsize", "64", "--nhid", "64", "--epochs", "1", "--log-interval", "100")

PROGRAMS: list[Program] = [
    # -- reinforcement learning (minimalRL: one file per algorithm, CartPole / Pendulum)
    _rl("REINFORCE.py", 310, ("rl-pg",)),
    _rl("actor_critic.py", 300, ("rl-ac",)),
    _rl("dqn.py", 320, ("rl-dqn",)),
    _rl("ppo.py", 100, ("rl-ppo",)),
    _rl("ppo-lstm.py", 150, ("rl-ppo",)),
    _rl("ppo-continuous.py", 20, ("rl-ppo",)),
    _rl("ddpg.py", 45, ("rl-ac",)),
    _rl("sac.py", 22, ("rl-ac",)),
    _rl("acer.py", 300, ("rl-ac",)),
    _rl("vtrace.py", 200, ("rl-ac",)),
    # pytorch/examples' REINFORCE and actor-critic (gymnasium API, seeded by their flags)
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "reinforcement_learning/reinforce.py",
        args=("--log-interval", "50"),
        shims=("gym",),
        env=(("GYM_SHIM_MAX_EPISODES", "301"),),
        tags=("rl-pg",),
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "reinforcement_learning/actor_critic.py",
        args=("--log-interval", "50"),
        shims=("gym",),
        env=(("GYM_SHIM_MAX_EPISODES", "301"),),
        tags=("rl-ac",),
    ),
    # -- character-level name models (makemore: six model types, one script)
    _makemore("transformer", ("transformer-lm",), seeds=(0, 1)),
    _makemore("rnn", ("rnn-lm",)),
    _makemore("gru", ("rnn-lm",)),
    _makemore("mlp", ()),
    _makemore("bow", ()),
    # -- word-level language model (WikiText-2 form, written from local text)
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "word_language_model/main.py",
        args=("--model", "LSTM", *WLM_SMALL),
        setup=(WIKITEXT,),
        tags=("rnn-lm",),
        variant="lstm-manual-sgd",
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "word_language_model/main.py",
        args=(
            "--model",
            "Transformer",
            "--nhead",
            "2",
            *WLM_SMALL,
            "--use-optimizer",
            "--lr",
            "0.001",
        ),
        setup=(WIKITEXT,),
        tags=("transformer-lm",),
        variant="transformer-adamw",
    ),
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "word_language_model/main.py",
        args=("--model", "GRU", "--tied", *WLM_SMALL, "--use-optimizer", "--lr", "0.002"),
        setup=(WIKITEXT,),
        tags=("rnn-lm",),
        variant="gru-tied-adamw",
    ),
    # -- graph convolution network (downloads Cora on every run: requests_cora serves it)
    Program(
        EXAMPLES,
        EXAMPLES_AT,
        "gcn/main.py",
        args=("--epochs", "300", "--val-every", "50"),
        shims=("requests_cora",),
        tags=("gnn",),
        seeds=(0, 1),
    ),
    # -- GPT language models: nanoGPT (its configurator's overrides), minGPT projects
    Program(
        NANOGPT, NANOGPT_AT, "train.py", args=NANO, setup=(CHAR_DATA,), tags=("transformer-lm",)
    ),
    Program(
        NANOGPT,
        NANOGPT_AT,
        "train.py",
        args=(
            *NANO,
            "--gradient_accumulation_steps=4",
            "--batch_size=2",
            "--dropout=0.1",
            "--warmup_iters=30",
        ),
        setup=(CHAR_DATA,),
        tags=("transformer-lm", "accumulation"),
        variant="accum4-dropout",
    ),
    # LoRA: only the adapters are in the optimizer; the base weights (random here: no
    # download) keep requires_grad and are never stepped
    Program(
        LORA_NANOGPT,
        LORA_NANOGPT_AT,
        "train.py",
        args=(
            "config/finetune_shakespeare.py",
            "--init_from=scratch",
            "--dataset=shakespeare_char",
            "--dtype=float32",
            "--gradient_accumulation_steps=2",
            *NANO[1:],
            "--batch_size=4",
        ),
        setup=(
            CHAR_DATA,
            f"git --git-dir={MIRRORS}/cccntu+minLoRA/repo archive {MINLORA_AT} minlora | tar -x",
        ),
        tags=("transformer-lm", "lora", "finetune-frozen", "accumulation"),
    ),
    # minGPT: its projects import the package from the repository root (pip install -e .
    # in its readme); a link beside each script stands in for the install
    Program(
        MINGPT,
        MINGPT_AT,
        "projects/adder/adder.py",
        args=("--trainer.max_iters=300", "--trainer.num_workers=0"),
        setup=("ln -sfn ../../mingpt projects/adder/mingpt",),
        tags=("transformer-lm",),
        seeds=(0, 1),
    ),
    Program(
        MINGPT,
        MINGPT_AT,
        "projects/chargpt/chargpt.py",
        args=(
            "--trainer.max_iters=300",
            "--trainer.num_workers=0",
            "--trainer.batch_size=16",
            "--model.model_type=gpt-nano",
            "--data.block_size=64",
        ),
        setup=(
            "ln -sfn ../../mingpt projects/chargpt/mingpt",
            f"{DATA} text projects/chargpt/input.txt --chars 300000",
        ),
        tags=("transformer-lm",),
    ),
    # -- Lightning: automatic optimisation with a submodule's forward (the demo Transformer),
    # automatic (DQN) and manual optimisation (PPO, two optimizers) on the old gym API
    Program(
        LIGHTNING,
        LIGHTNING_AT,
        "examples/pytorch/basics/transformer.py",
        setup=(
            f"{DATA} wikitext-file examples/pytorch/basics/data/wikitext-2.txt --tokens 150570",
        ),
        tags=("lightning-auto", "lightning-submodule", "transformer-lm"),
    ),
    Program(
        LIGHTNING,
        LIGHTNING_AT,
        "examples/pytorch/domain_templates/reinforce_learn_Qnet.py",
        shims=("gym",),
        env=(("GYM_SHIM_API", "0.21"), ("GYM_SHIM_MAX_EPISODES", "80")),
        tags=("lightning-auto", "rl-dqn"),
    ),
    Program(
        LIGHTNING,
        LIGHTNING_AT,
        "examples/pytorch/domain_templates/reinforce_learn_ppo.py",
        args=("--steps_per_epoch", "256", "--batch_size", "32"),
        shims=("gym",),
        env=(("GYM_SHIM_API", "0.21"), ("GYM_SHIM_MAX_EPISODES", "360")),
        tags=("lightning-manual", "rl-ppo"),
    ),
    # -- meta-learning on sine waves: first-order MAML and Reptile by hand (no optimizer);
    # 30,000 iterations are a literal, so the matplotlib shim ends the run at its second
    # progress plot (iteration 1,000)
    Program(
        MAML,
        MAML_AT,
        "main.py",
        args=("--run=MAML",),
        shims=("matplotlib",),
        env=(("MPL_SHIM_EXIT_AFTER_PAUSES", "2"),),
        tags=("meta",),
        variant="maml",
    ),
    Program(
        MAML,
        MAML_AT,
        "main.py",
        args=("--run=Reptile",),
        shims=("matplotlib",),
        env=(("MPL_SHIM_EXIT_AFTER_PAUSES", "2"),),
        tags=("meta",),
        variant="reptile",
    ),
    # -- sparsely-gated mixture of experts (noisy top-4 of 10) on CIFAR-10's shapes: 300
    # batches of 64 from the torchvision shim's synthetic set, two loader workers
    Program(
        MOE,
        MOE_AT,
        "cifar10_example.py",
        shims=("torchvision",),
        env=(("TV_SHIM_TRAIN", "19200"), ("TV_SHIM_TEST", "256")),
        tags=("moe",),
    ),
]
