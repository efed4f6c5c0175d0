"""The corpus shims the programs of programs_d run on: tensorboardX (the tensorboard shim's
writer under its name), the PIL stand-in, the gym shim's ``_max_episode_steps``; and that
programs_d's entries are well formed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
SHIMS = CORPUS / "shims"


def _python(code: str, shim: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SHIMS / shim)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=300,
    )  # fmt: skip


def test_tensorboardx_writer_makes_its_log_folder_and_takes_every_call(tmp_path: Path) -> None:
    code = (
        "from tensorboardX import SummaryWriter\n"
        "w = SummaryWriter('./logs/vqvae')\n"
        "w.add_scalar('loss/train', 1.0, 0); w.add_image('x', None, 0); w.close()\n"
        "print(w.get_logdir())\n"
    )
    out = _python(code, "tensorboardX", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "./logs/vqvae"
    assert (tmp_path / "logs" / "vqvae").is_dir()


def test_pil_imports_and_refuses_to_open_an_image(tmp_path: Path) -> None:
    code = (
        "from PIL import Image\n"
        "try:\n"
        "    Image.open('x.png')\n"
        "except OSError as e:\n"
        "    print('refused', 'Pillow' in str(e))\n"
    )
    out = _python(code, "PIL", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused True"


def test_gym_env_has_its_time_limit_under_gyms_name(tmp_path: Path) -> None:
    code = (
        "import gym\n"
        "env = gym.make('Pendulum-v1')\n"
        "short = gym.make('CartPole-v1', max_episode_steps=7)\n"
        "print(env._max_episode_steps, short._max_episode_steps)\n"
    )
    out = _python(code, "gym", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["200", "7"]


def test_programs_d_entries_are_pinned_and_use_existing_shims() -> None:
    sys.path.insert(0, str(CORPUS))
    from spec import all_programs, load_module

    module = load_module(CORPUS / "programs_d.py")
    programs = module.PROGRAMS  # type: ignore[attr-defined]
    names = {p.name for p in all_programs()}
    assert len(programs) >= 4
    assert all(p.name in names for p in programs)  # all_programs collects programs_d.py
    assert len({p.project for p in programs}) == len(programs)
    for p in programs:
        assert all((SHIMS / s).is_dir() for s in p.shims)
