# ruff: noqa: N999 (the package is named as the one it stands in for)
"""A stand-in for Pillow (not installed here), for scripts that import `PIL.Image` at the top
for a dataset the corpus does not use (pytorch-vqvae's MiniImagenet): the import succeeds,
opening an image says that Pillow is not there."""

__version__ = "0.0"
