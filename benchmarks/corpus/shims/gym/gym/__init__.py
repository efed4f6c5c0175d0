"""A small stand-in for `gym`/`gymnasium`: the classic-control environments the corpus's RL
programs train on, written for the corpus (no gym install, no network, no rendering).

`make(name, **kwargs)` gives CartPole-v0/v1, Pendulum-v1, MountainCar-v0 and Acrobot-v1 with
the gymnasium API (`reset(seed=None) -> (obs, info)`, `step(a) -> (obs, reward, terminated,
truncated, info)`), a time limit that truncates, and deterministic dynamics under a seed.

`GYM_SHIM_API=0.21` gives the older API instead (`reset() -> obs`, `step(a) -> (obs, reward,
done, info)`, done at the time limit too), which gym before 0.26 had.

Two environment variables let a corpus run end and repeat:
- `GYM_SHIM_MAX_EPISODES`: after this many episodes in the process, the next `reset()` ends
  the program with exit status 0 (the RL scripts loop over 10,000 episodes and have no flag).
- `GYM_SHIM_SEED`, else the corpus runner's `GW_CORPUS_SEED`, else 0: the seed of an
  environment never reset with one (the runner seeds the global generators itself).
"""

from __future__ import annotations

import math
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

__version__ = "0.26.2"

_episodes = 0


def _default_seed() -> int:
    return int(os.environ.get("GYM_SHIM_SEED") or os.environ.get("GW_CORPUS_SEED") or 0)


def _episode_started() -> None:
    global _episodes
    limit = os.environ.get("GYM_SHIM_MAX_EPISODES")
    if limit is not None and _episodes >= int(limit):
        print(f"[gym shim] {_episodes} episodes done, the limit; ending the program", flush=True)
        sys.stdout.flush()
        raise SystemExit(0)
    _episodes += 1


class Space:
    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.np_random = np.random.default_rng(0)

    def seed(self, seed: int | None = None) -> list[int | None]:
        self.np_random = np.random.default_rng(seed)
        return [seed]


class Discrete(Space):
    def __init__(self, n: int, start: int = 0) -> None:
        super().__init__((), np.int64)
        self.n = n
        self.start = start

    def sample(self) -> int:
        return int(self.start + self.np_random.integers(self.n))

    def contains(self, x: Any) -> bool:
        return self.start <= int(x) < self.start + self.n

    def __repr__(self) -> str:
        return f"Discrete({self.n})"


class Box(Space):
    def __init__(
        self, low: Any, high: Any, shape: tuple[int, ...] | None = None, dtype: Any = np.float32
    ) -> None:
        if shape is None:
            shape = np.shape(low) if np.ndim(low) else np.shape(high)
        super().__init__(tuple(shape), dtype)
        self.low = np.broadcast_to(np.asarray(low, dtype=self.dtype), self.shape).copy()
        self.high = np.broadcast_to(np.asarray(high, dtype=self.dtype), self.shape).copy()

    def sample(self) -> np.ndarray:
        low = np.where(np.isfinite(self.low), self.low, -1.0)
        high = np.where(np.isfinite(self.high), self.high, 1.0)
        return self.np_random.uniform(low, high).astype(self.dtype)

    def contains(self, x: Any) -> bool:
        arr = np.asarray(x)
        return bool(
            arr.shape == self.shape and np.all(arr >= self.low) and np.all(arr <= self.high)
        )

    def __repr__(self) -> str:
        return f"Box({self.low.min()}, {self.high.max()}, {self.shape}, {self.dtype})"


spaces = types.SimpleNamespace(
    Discrete=Discrete,
    Box=Box,
    Space=Space,
    box=types.SimpleNamespace(Box=Box),
    discrete=types.SimpleNamespace(Discrete=Discrete),
    space=types.SimpleNamespace(Space=Space),
)


def _old_api() -> bool:
    return os.environ.get("GYM_SHIM_API") == "0.21"


@dataclass
class EnvSpec:
    id: str
    reward_threshold: float | None
    max_episode_steps: int


class Env:
    """One environment: subclasses give `_reset(rng) -> obs` and `_step(action) ->
    (obs, reward, terminated)`; the time limit and autoreset live here."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    observation_space: Space
    action_space: Space

    def __init__(self, spec: EnvSpec, autoreset: bool = False, render_mode: str | None = None):
        self.spec = spec
        self.render_mode = render_mode
        self.autoreset = autoreset
        self.np_random = np.random.default_rng(_default_seed())
        self._t = 0
        self._needs_reset = False

    @property
    def unwrapped(self) -> Env:
        return self

    @property
    def _max_episode_steps(self) -> int:
        """The time limit, under the name gym's `TimeLimit` wrapper gives it (SAC scripts
        read it to tell a truncation from a terminal state)."""
        return self.spec.max_episode_steps

    def seed(self, seed: int | None = None) -> list[int | None]:
        self.np_random = np.random.default_rng(seed)
        return [seed]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        _episode_started()
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
            self.action_space.seed(seed)
        self._t = 0
        self._needs_reset = False
        obs = self._reset()
        return obs if _old_api() else (obs, {})

    def step(self, action: Any):
        if self.autoreset and self._needs_reset:
            obs = self._reset()
            self._t, self._needs_reset = 0, False
            return (obs, 0.0, False, {}) if _old_api() else (obs, 0.0, False, False, {})
        obs, reward, terminated = self._step(action)
        self._t += 1
        truncated = self._t >= self.spec.max_episode_steps and not terminated
        self._needs_reset = terminated or truncated
        if _old_api():
            return obs, float(reward), bool(terminated or truncated), {}
        return obs, float(reward), bool(terminated), bool(truncated), {}

    def render(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self) -> None:
        return None

    def _reset(self) -> np.ndarray:
        raise NotImplementedError

    def _step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        raise NotImplementedError


class CartPole(Env):
    """A pole hinged on a cart on a track; push left or right to keep it up (Barto, Sutton
    and Anderson 1983), integrated with explicit Euler at 50 Hz."""

    gravity, cart_mass, pole_mass, half_length, force, dt = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    angle_limit = 12 * 2 * math.pi / 360
    x_limit = 2.4

    def __init__(self, spec: EnvSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        high = np.array([self.x_limit * 2, np.inf, self.angle_limit * 2, np.inf], np.float32)
        self.observation_space = Box(-high, high, dtype=np.float32)
        self.action_space = Discrete(2)
        self.state = np.zeros(4)

    def _reset(self) -> np.ndarray:
        self.state = self.np_random.uniform(-0.05, 0.05, size=4)
        return self.state.astype(np.float32)

    def _step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        x, x_dot, theta, theta_dot = self.state
        push = self.force if int(action) == 1 else -self.force
        total = self.cart_mass + self.pole_mass
        pole_moment = self.pole_mass * self.half_length
        cos, sin = math.cos(theta), math.sin(theta)
        tmp = (push + pole_moment * theta_dot**2 * sin) / total
        theta_acc = (self.gravity * sin - cos * tmp) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * cos**2 / total)
        )
        x_acc = tmp - pole_moment * theta_acc * cos / total
        x, x_dot = x + self.dt * x_dot, x_dot + self.dt * x_acc
        theta, theta_dot = theta + self.dt * theta_dot, theta_dot + self.dt * theta_acc
        self.state = np.array([x, x_dot, theta, theta_dot])
        fallen = abs(x) > self.x_limit or abs(theta) > self.angle_limit
        return self.state.astype(np.float32), 1.0, fallen


class Pendulum(Env):
    """Swing a frictionless pendulum up and hold it, torque limited to 2 (reward is minus the
    angle squared, speed and torque costs)."""

    max_speed, max_torque, dt, g, m, length = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, spec: EnvSpec, g: float = 10.0, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.g = g
        high = np.array([1.0, 1.0, self.max_speed], np.float32)
        self.observation_space = Box(-high, high, dtype=np.float32)
        self.action_space = Box(-self.max_torque, self.max_torque, shape=(1,), dtype=np.float32)
        self.state = np.zeros(2)

    def _obs(self) -> np.ndarray:
        theta, speed = self.state
        return np.array([math.cos(theta), math.sin(theta), speed], np.float32)

    def _reset(self) -> np.ndarray:
        self.state = self.np_random.uniform([-math.pi, -1.0], [math.pi, 1.0])
        return self._obs()

    def _step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        theta, speed = self.state
        u = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -2.0, 2.0))
        wrapped = ((theta + math.pi) % (2 * math.pi)) - math.pi
        cost = wrapped**2 + 0.1 * speed**2 + 0.001 * u**2
        inertia = self.m * self.length**2
        speed = (
            speed + (3 * self.g / (2 * self.length) * math.sin(theta) + 3.0 / inertia * u) * self.dt
        )
        speed = float(np.clip(speed, -self.max_speed, self.max_speed))
        self.state = np.array([theta + speed * self.dt, speed])
        return self._obs(), -cost, False


class MountainCar(Env):
    """An underpowered car in a valley: rock back and forth to reach the flag at x = 0.5."""

    def __init__(self, spec: EnvSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.observation_space = Box(
            np.array([-1.2, -0.07], np.float32), np.array([0.6, 0.07], np.float32)
        )
        self.action_space = Discrete(3)
        self.state = np.zeros(2)

    def _reset(self) -> np.ndarray:
        self.state = np.array([self.np_random.uniform(-0.6, -0.4), 0.0])
        return self.state.astype(np.float32)

    def _step(self, action: Any) -> tuple[np.ndarray, float, bool]:
        x, v = self.state
        v = float(np.clip(v + (int(action) - 1) * 0.001 - 0.0025 * math.cos(3 * x), -0.07, 0.07))
        x = float(np.clip(x + v, -1.2, 0.6))
        if x <= -1.2 and v < 0:
            v = 0.0
        self.state = np.array([x, v])
        return self.state.astype(np.float32), -1.0, x >= 0.5


_REGISTRY: dict[str, tuple[type[Env], float | None, int]] = {
    "CartPole-v0": (CartPole, 195.0, 200),
    "CartPole-v1": (CartPole, 475.0, 500),
    "Pendulum-v1": (Pendulum, None, 200),
    "MountainCar-v0": (MountainCar, -110.0, 200),
}


def make(id: str, max_episode_steps: int | None = None, **kwargs: Any) -> Env:
    """The named environment (one of CartPole-v0/v1, Pendulum-v1, MountainCar-v0)."""
    if id not in _REGISTRY:
        raise KeyError(f"the gym shim has no environment {id!r}; it has {sorted(_REGISTRY)}")
    cls, threshold, steps = _REGISTRY[id]
    kwargs.pop("disable_env_checker", None)
    spec = EnvSpec(id, threshold, max_episode_steps or steps)
    return cls(spec, **kwargs)
