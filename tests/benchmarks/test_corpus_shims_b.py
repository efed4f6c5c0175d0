"""The corpus shims the RL, language, graph and meta-learning programs run on (programs_b):
the gym environments, the text/graph data writers, the no-network Cora download, the no-op
tensorboard, and that programs_b's entries are well formed."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
SHIMS = CORPUS / "shims"


def _python(code: str, shim: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(SHIMS / shim), **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120
    )


@pytest.fixture
def gym(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(SHIMS / "gym"))
    monkeypatch.delenv("GYM_SHIM_MAX_EPISODES", raising=False)
    monkeypatch.delenv("GYM_SHIM_API", raising=False)
    import gym as module

    monkeypatch.setattr(module, "_episodes", 0)
    return module


def _rollout(env, seed: int, steps: int = 200) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    for t in range(steps):
        obs, _reward, terminated, truncated, _ = env.step(t % 2)
        seen.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
    return seen


def test_cartpole_repeats_under_a_seed_and_differs_across_seeds(gym) -> None:  # type: ignore[no-untyped-def]
    a = _rollout(gym.make("CartPole-v1"), seed=3)
    b = _rollout(gym.make("CartPole-v1"), seed=3)
    c = _rollout(gym.make("CartPole-v1"), seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])
    assert a[0].dtype == np.float32 and a[0].shape == (4,)


def test_cartpole_falls_when_pushed_one_way(gym) -> None:  # type: ignore[no-untyped-def]
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    steps = 0
    terminated = False
    while not terminated and steps < 100:
        _, reward, terminated, truncated, _ = env.step(1)
        steps += 1
        assert reward == 1.0 and not truncated
    assert terminated and steps < 30  # a constant push topples the pole within a second or so


def test_pendulum_time_limit_truncates_and_autoreset(gym) -> None:  # type: ignore[no-untyped-def]
    env = gym.make("Pendulum-v1", max_episode_steps=5, autoreset=True)
    env.reset(seed=1)
    for _ in range(4):
        obs, reward, terminated, truncated, _ = env.step([0.5])
        assert obs.shape == (3,) and reward <= 0 and not terminated and not truncated
    *_, truncated, _ = env.step([0.5])
    assert truncated
    assert env.step([0.0])[1] == 0.0  # the next step resets instead
    assert env.action_space.shape == (1,) and env.observation_space.shape == (3,)


def test_old_api(gym, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GYM_SHIM_API", "0.21")
    env = gym.make("CartPole-v0")
    assert isinstance(env.reset(), np.ndarray)
    assert len(env.step(0)) == 4
    assert isinstance(env.action_space, gym.spaces.discrete.Discrete)
    assert env.spec.reward_threshold == 195.0


def test_episode_cap_ends_the_program(gym, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GYM_SHIM_MAX_EPISODES", "2")
    env = gym.make("CartPole-v1")
    env.reset()
    env.reset()
    with pytest.raises(SystemExit) as stop:
        env.reset()
    assert stop.value.code == 0


def test_unknown_environment_is_named(gym) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KeyError, match="LunarLander"):
        gym.make("LunarLander-v2")


def _corpus_data():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(SHIMS / "textdata"))
    try:
        import corpus_data
    finally:
        sys.path.pop(0)
    return corpus_data


def test_text_writers(tmp_path: Path) -> None:
    data = _corpus_data()
    data.write_nanogpt_char(tmp_path / "char", 20_000)
    meta = pickle.loads((tmp_path / "char" / "meta.pkl").read_bytes())
    train = np.fromfile(tmp_path / "char" / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "char" / "val.bin", dtype=np.uint16)
    assert len(train) + len(val) == 20_000 and train.max() < meta["vocab_size"]
    data.write_wikitext_file(tmp_path / "wt.txt", 500, 4_000)
    lines = (tmp_path / "wt.txt").read_text().splitlines()
    assert sum(len(line.split()) + 1 for line in lines) == 4_000
    assert "<unk>" in (tmp_path / "wt.txt").read_text()


def test_cora_format(tmp_path: Path) -> None:
    data = _corpus_data()
    data.write_cora(tmp_path, 200, 70, 7)
    rows = [r.split("\t") for r in (tmp_path / "cora.content").read_text().splitlines()]
    assert len(rows) == 200 and all(len(r) == 72 for r in rows)
    ids = {r[0] for r in rows}
    cites = [c.split("\t") for c in (tmp_path / "cora.cites").read_text().splitlines()]
    assert cites and all(a in ids and b in ids for a, b in cites)
    assert {r[-1] for r in rows} == {f"class_{i}" for i in range(7)}


def test_requests_stand_in_serves_cora_only() -> None:
    code = (
        "import requests, tarfile\n"
        "with requests.get('https://x/cora.tgz', stream=True) as r:\n"
        "    names = tarfile.open(fileobj=r.raw, mode='r:gz').getnames()\n"
        "print(sorted(names))\n"
        "try:\n    requests.get('https://example.com')\n"
        "except requests.ConnectionError:\n    print('refused')\n"
    )
    out = _python(code, "requests_cora", CORA_SHIM_NODES="50", CORA_SHIM_FEATURES="14")
    assert out.returncode == 0, out.stderr
    assert "cora/cora.cites" in out.stdout and "refused" in out.stdout


def test_tensorboard_writer_is_a_no_op(tmp_path: Path) -> None:
    code = (
        "from torch.utils.tensorboard import SummaryWriter\n"
        f"w = SummaryWriter({str(tmp_path)!r})\n"
        "w.add_scalar('loss', 1.0, 0); w.flush(); w.close(); print('ok')\n"
    )
    out = _python(code, "tensorboard")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and not any(tmp_path.iterdir())


def test_programs_b_are_well_formed() -> None:
    sys.path.insert(0, str(CORPUS))
    try:
        from spec import load_module

        programs = load_module(CORPUS / "programs_b.py").PROGRAMS  # type: ignore[attr-defined]
    finally:
        sys.path.remove(str(CORPUS))
    assert len(programs) >= 22
    assert len({p.project for p in programs}) >= 9
    assert len({p.name for p in programs}) == len(programs)
