"""Part of the no-op tensorboard stand-in (see the package's docstring)."""
