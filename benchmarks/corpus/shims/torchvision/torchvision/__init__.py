"""gradwatch corpus shim: a small torchvision of our own (torchvision cannot be installed
next to this torch build). Only what corpus programs import: synthetic learnable
datasets, tensor transforms, image grids/PNG files, ResNets."""

from torchvision import datasets, io, models, transforms, utils

__version__ = "0.0+gradwatch.shim"

__all__ = ["datasets", "io", "models", "transforms", "utils"]
