"""`torchvision.datasets.folder` of the shim: the folder datasets and loader the package
defines, under the submodule name torchvision gives them (swa_gaussian's CamVid imports
`default_loader` from here)."""

from torchvision.datasets import IMG_EXTENSIONS, DatasetFolder, ImageFolder, default_loader

__all__ = ["IMG_EXTENSIONS", "DatasetFolder", "ImageFolder", "default_loader"]
