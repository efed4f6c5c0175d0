"""Synthetic stand-ins for torchvision's datasets: deterministic, learnable (each class is
a fixed smooth pattern; a sample is its class pattern, shifted a little, plus noise), of the
real image shapes. Nothing is downloaded. Sizes: ``$TV_SHIM_TRAIN`` (default 1024) and
``$TV_SHIM_TEST`` (default 256) samples. Images are uint8 numpy arrays (HxW or HxWxC), which
``transforms.ToTensor`` and the other shim transforms take where torchvision takes a PIL image."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import torch

from torchvision.io import read_png

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "EMNIST",
    "KMNIST",
    "MNIST",
    "STL10",
    "SVHN",
    "DatasetFolder",
    "FakeData",
    "FashionMNIST",
    "ImageFolder",
    "VisionDataset",
]  # fmt: skip


def _size(train: bool) -> int:
    return int(os.environ.get("TV_SHIM_TRAIN" if train else "TV_SHIM_TEST", 1024 if train else 256))


def synthetic_images(
    name: str, n: int, shape: tuple[int, int, int], classes: int, train: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` uint8 images of HxWxC ``shape`` and their labels, the same on every call."""
    h, w, c = shape
    base = zlib.crc32(name.encode())
    pat_rng = np.random.RandomState(base % (2**31))
    low = pat_rng.randn(classes, max(h // 4, 2), max(w // 4, 2), c)
    reps = (1, (h + low.shape[1] - 1) // low.shape[1], (w + low.shape[2] - 1) // low.shape[2], 1)
    patterns = np.kron(low, np.ones((*reps[:3], 1)))[:, :h, :w, :]
    rng = np.random.RandomState((base + (1 if train else 2)) % (2**31))
    labels = rng.permutation(np.arange(n) % classes)
    dy = rng.randint(-2, 3, size=n)
    dx = rng.randint(-2, 3, size=n)
    images = np.empty((n, h, w, c), dtype=np.uint8)
    for i in range(n):
        p = np.roll(patterns[labels[i]], (dy[i], dx[i]), axis=(0, 1))
        x = 128 + 50 * p + 30 * rng.randn(h, w, c)
        images[i] = np.clip(x, 0, 255).astype(np.uint8)
    return images, labels.astype(np.int64)


class VisionDataset(torch.utils.data.Dataset):
    def __init__(self, root=None, transforms=None, transform=None, target_transform=None):
        self.root = root
        self.transform = transform
        self.target_transform = target_transform
        self.transforms = transforms

    def _apply(self, img, target):
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class _Synthetic(VisionDataset):
    shape: tuple[int, int, int] = (28, 28, 1)
    num_classes = 10
    classes: tuple[str, ...] = tuple(str(i) for i in range(10))

    def __init__(self, root=None, train=True, transform=None, target_transform=None,
                 download=False, split=None, **kwargs):  # fmt: skip
        super().__init__(root, transform=transform, target_transform=target_transform)
        if split is not None:
            train = split in ("train", "train+unlabeled", "unlabeled", "extra", "byclass")
        self.train = train
        self.split = split
        images, labels = synthetic_images(
            type(self).__name__, _size(train), self.shape, self.num_classes, train
        )
        self._images = images if self.shape[2] > 1 else images[:, :, :, 0]
        self._labels = labels

    def __len__(self):
        return len(self._labels)

    def __getitem__(self, index):
        return self._apply(self._images[index], int(self._labels[index]))


class MNIST(_Synthetic):
    """Like torchvision's: ``data`` (uint8 Nx28x28 tensor), ``targets`` (int64 tensor)."""

    classes = ("0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five",
               "6 - six", "7 - seven", "8 - eight", "9 - nine")  # fmt: skip

    @property
    def data(self):
        return torch.from_numpy(self._images)

    @property
    def targets(self):
        return torch.from_numpy(self._labels)

    @property
    def train_data(self):
        return self.data

    @property
    def train_labels(self):
        return self.targets

    test_data = train_data
    test_labels = train_labels


class FashionMNIST(MNIST):
    classes = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")  # fmt: skip


class KMNIST(MNIST):
    classes = ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo")


class EMNIST(MNIST):
    num_classes = 26
    classes = tuple(chr(ord("a") + i) for i in range(26))


class CIFAR10(_Synthetic):
    """Like torchvision's: ``data`` (uint8 Nx32x32x3 array), ``targets`` (list of int)."""

    shape = (32, 32, 3)
    classes = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
               "ship", "truck")  # fmt: skip

    @property
    def data(self):
        return self._images

    @property
    def targets(self):
        return [int(t) for t in self._labels]


class CIFAR100(CIFAR10):
    num_classes = 100
    classes = tuple(f"class{i}" for i in range(100))


class SVHN(_Synthetic):
    shape = (32, 32, 3)

    @property
    def data(self):
        return self._images.transpose(0, 3, 1, 2)

    @property
    def labels(self):
        return self._labels


class STL10(_Synthetic):
    shape = (96, 96, 3)

    @property
    def labels(self):
        return self._labels


class FakeData(VisionDataset):
    """Random images, one fixed image per index (as torchvision's)."""

    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None,
                 target_transform=None, random_offset=0):  # fmt: skip
        super().__init__(None, transform=transform, target_transform=target_transform)
        self.size = size
        self.image_size = tuple(image_size)
        self.num_classes = num_classes
        self.random_offset = random_offset

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if index >= len(self):
            raise IndexError(f"{type(self).__name__} index out of range")
        g = torch.Generator().manual_seed(index + self.random_offset)
        img = torch.randn(*self.image_size, generator=g)
        target = int(torch.randint(0, self.num_classes, (1,), generator=g))
        array = (img.clamp(-2, 2) * 60 + 128).to(torch.uint8).permute(1, 2, 0).numpy()
        if array.shape[2] == 1:
            array = array[:, :, 0]
        return self._apply(array, target)


IMG_EXTENSIONS = (".png", ".npy")


def default_loader(path):
    return np.load(path) if str(path).endswith(".npy") else read_png(path)


class DatasetFolder(VisionDataset):
    """root/<class>/<file>: every file the loader takes, classes in sorted order."""

    def __init__(self, root, loader=default_loader, extensions=IMG_EXTENSIONS, transform=None,
                 target_transform=None, is_valid_file=None, **kwargs):  # fmt: skip
        super().__init__(root, transform=transform, target_transform=target_transform)
        top = Path(root)
        self.classes = sorted(d.name for d in top.iterdir() if d.is_dir())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = []
        for c in self.classes:
            for f in sorted((top / c).rglob("*")):
                ok = is_valid_file(str(f)) if is_valid_file else f.suffix.lower() in extensions
                if f.is_file() and ok:
                    self.samples.append((str(f), self.class_to_idx[c]))
        if not self.samples:
            raise FileNotFoundError(f"no image files under {root}")
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]
        self.loader = loader

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, target = self.samples[index]
        return self._apply(self.loader(path), target)


class ImageFolder(DatasetFolder):
    pass


def write_image_folder(root, classes=4, per_class=64, size=32, channels=3):
    """Write a synthetic ImageFolder tree (PNG files) for programs that read one."""
    from torchvision.io import write_png

    images, labels = synthetic_images(
        f"folder{classes}", classes * per_class, (size, size, channels), classes, True
    )
    for i, (img, label) in enumerate(zip(images, labels, strict=True)):
        d = Path(root) / f"class{label}"
        d.mkdir(parents=True, exist_ok=True)
        write_png(img, d / f"{i:05d}.png")
