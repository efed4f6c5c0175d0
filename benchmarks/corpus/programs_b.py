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

DATA = "$PYTHON $CORPUS_SHIMS/textdata/corpus_data.py"


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
        args=("-i", "names.txt", "-o", f"out-{kind}", "--type", kind, "--max-steps", "300",
              "--num-workers", "0"),
        shims=("tensorboard",),
        seeds=seeds,
        tags=tags,
        variant=kind,
    )  # fmt: skip


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
        args=("--model", "Transformer", "--nhead", "2", *WLM_SMALL, "--use-optimizer",
              "--lr", "0.001"),
        setup=(WIKITEXT,),
        tags=("transformer-lm",),
        variant="transformer-adamw",
    ),  # fmt: skip
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
]
