"""`gymnasium` for the corpus: the same small environments as the `gym` shim beside it."""

from gym import Box, Discrete, Env, EnvSpec, Space, make, spaces

__all__ = ["Box", "Discrete", "Env", "EnvSpec", "Space", "make", "spaces"]
__version__ = "0.29.1"
