"""The documented import path for restoring a checkpoint saved by the ``checkpoint`` policy
(``gradwatch.checkpoint.restore``); the code is :mod:`gradwatch.hooks.checkpoint_policy`."""

from gradwatch.hooks.checkpoint_policy import restore, rng_states, set_rng_states

__all__ = ["restore", "rng_states", "set_rng_states"]
