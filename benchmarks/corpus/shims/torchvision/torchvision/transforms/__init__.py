"""Real implementations, on tensors, of the torchvision transforms corpus programs use.

Images come in as uint8 numpy arrays (HxW or HxWxC; the shim datasets' stand-in for a PIL
image) or as CxHxW tensors; the geometric and colour transforms turn an array into a float
CxHxW tensor in [0, 1] and return tensors, which ``ToTensor`` passes through. Random choices
draw from torch's global generator, as torchvision's do.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as nnf

from torchvision.transforms import functional

InterpolationMode = functional.InterpolationMode

__all__ = [
    "CenterCrop", "ColorJitter", "Compose", "GaussianBlur", "Grayscale", "InterpolationMode",
    "Lambda", "Normalize", "Pad", "RandomApply", "RandomCrop", "RandomGrayscale",
    "RandomHorizontalFlip", "RandomResizedCrop", "RandomRotation", "RandomVerticalFlip",
    "Resize", "ToPILImage", "ToTensor", "functional",
]  # fmt: skip


def _image(img) -> torch.Tensor:
    return functional.to_tensor(img)


def _pair(size):
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    return tuple(int(s) for s in size) if len(size) == 2 else (int(size[0]), int(size[0]))


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class ToTensor:
    def __call__(self, pic):
        return functional.to_tensor(pic)


class ToPILImage:
    """No PIL here: keeps the image as a float CxHxW tensor."""

    def __init__(self, mode=None):
        self.mode = mode

    def __call__(self, pic):
        return _image(pic)


class PILToTensor(ToTensor):
    pass


class ConvertImageDtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __call__(self, img):
        return _image(img).to(self.dtype)


class Normalize(torch.nn.Module):
    def __init__(self, mean, std, inplace=False):
        super().__init__()
        self.mean, self.std, self.inplace = mean, std, inplace

    def forward(self, tensor):
        return functional.normalize(tensor, self.mean, self.std, self.inplace)


class Lambda:
    def __init__(self, lambd):
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)


class Resize(torch.nn.Module):
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None,
                 antialias=True):  # fmt: skip
        super().__init__()
        self.size, self.interpolation, self.max_size = size, interpolation, max_size

    def forward(self, img):
        return functional.resize(img, self.size, self.interpolation, self.max_size)


Scale = Resize


class CenterCrop(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.size = _pair(size)

    def forward(self, img):
        return functional.center_crop(img, self.size)


class Pad(torch.nn.Module):
    def __init__(self, padding, fill=0, padding_mode="constant"):
        super().__init__()
        self.padding, self.fill, self.padding_mode = padding, fill, padding_mode

    def forward(self, img):
        return functional.pad(img, self.padding, self.fill, self.padding_mode)


class RandomCrop(torch.nn.Module):
    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        super().__init__()
        self.size = _pair(size)
        self.padding, self.pad_if_needed = padding, pad_if_needed
        self.fill, self.padding_mode = fill, padding_mode

    def forward(self, img):
        img = _image(img)
        if self.padding is not None:
            img = functional.pad(img, self.padding, self.fill, self.padding_mode)
        th, tw = self.size
        h, w = img.shape[-2:]
        if self.pad_if_needed and (h < th or w < tw):
            img = functional.pad(img, [max(tw - w, 0), max(th - h, 0)], self.fill)
            h, w = img.shape[-2:]
        i = int(torch.randint(0, h - th + 1, size=(1,)))
        j = int(torch.randint(0, w - tw + 1, size=(1,)))
        return img[..., i : i + th, j : j + tw]


class RandomHorizontalFlip(torch.nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, img):
        img = _image(img)
        return img.flip(-1) if torch.rand(1) < self.p else img


class RandomVerticalFlip(RandomHorizontalFlip):
    def forward(self, img):
        img = _image(img)
        return img.flip(-2) if torch.rand(1) < self.p else img


class RandomResizedCrop(torch.nn.Module):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):  # fmt: skip
        super().__init__()
        self.size = _pair(size)
        self.scale, self.ratio, self.interpolation = scale, ratio, interpolation

    def forward(self, img):
        img = _image(img)
        h, w = img.shape[-2:]
        area = h * w
        log_ratio = torch.log(torch.tensor(self.ratio))
        for _ in range(10):
            target = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            cw = round(math.sqrt(target * aspect))
            ch = round(math.sqrt(target / aspect))
            if 0 < cw <= w and 0 < ch <= h:
                i = int(torch.randint(0, h - ch + 1, size=(1,)))
                j = int(torch.randint(0, w - cw + 1, size=(1,)))
                break
        else:
            ch, cw = h, w
            i = j = 0
        crop = img[..., i : i + ch, j : j + cw]
        return functional.resize(crop, list(self.size), self.interpolation)


class ColorJitter(torch.nn.Module):
    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        super().__init__()
        self.brightness = self._range(brightness, 1)
        self.contrast = self._range(contrast, 1)
        self.saturation = self._range(saturation, 1)
        self.hue = self._range(hue, 0)

    @staticmethod
    def _range(value, center):
        if isinstance(value, numbers.Number):
            return None if value == 0 else (max(center - value, 0), center + value)
        return tuple(value)

    def forward(self, img):
        img = _image(img)
        order = torch.randperm(4)
        for k in order.tolist():
            if k == 0 and self.brightness:
                f = torch.empty(1).uniform_(*self.brightness).item()
                img = (img * f).clamp(0, 1)
            elif k == 1 and self.contrast:
                f = torch.empty(1).uniform_(*self.contrast).item()
                mean = functional.rgb_to_grayscale(img).mean()
                img = (f * img + (1 - f) * mean).clamp(0, 1)
            elif k == 2 and self.saturation:
                f = torch.empty(1).uniform_(*self.saturation).item()
                gray = functional.rgb_to_grayscale(img).expand_as(img)
                img = (f * img + (1 - f) * gray).clamp(0, 1)
            elif k == 3 and self.hue:
                f = torch.empty(1).uniform_(*self.hue).item()
                if img.shape[-3] == 3:  # a hue shift as a rotation of the channels' mix
                    img = (img.roll(1, dims=-3) * abs(f) + img * (1 - abs(f))).clamp(0, 1)
        return img


class Grayscale(torch.nn.Module):
    def __init__(self, num_output_channels=1):
        super().__init__()
        self.num_output_channels = num_output_channels

    def forward(self, img):
        gray = functional.rgb_to_grayscale(_image(img))
        return gray.expand(self.num_output_channels, *gray.shape[-2:]).clone()


class RandomGrayscale(torch.nn.Module):
    def __init__(self, p=0.1):
        super().__init__()
        self.p = p

    def forward(self, img):
        img = _image(img)
        if torch.rand(1) < self.p:
            return functional.rgb_to_grayscale(img).expand_as(img).clone()
        return img


class RandomApply(torch.nn.Module):
    def __init__(self, transforms, p=0.5):
        super().__init__()
        self.transforms, self.p = list(transforms), p

    def forward(self, img):
        if self.p < torch.rand(1):
            return img
        for t in self.transforms:
            img = t(img)
        return img


class GaussianBlur(torch.nn.Module):
    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        super().__init__()
        self.kernel_size = _pair(kernel_size)
        self.sigma = (sigma, sigma) if isinstance(sigma, numbers.Number) else tuple(sigma)

    def forward(self, img):
        img = _image(img)
        s = torch.empty(1).uniform_(self.sigma[0], self.sigma[1]).item()
        k = self.kernel_size[0] | 1
        x = torch.arange(k, dtype=torch.float32) - k // 2
        g = torch.exp(-(x**2) / (2 * s * s))
        g = g / g.sum()
        c = img.shape[-3]
        batch = img.reshape(-1, c, *img.shape[-2:])
        kh = g.view(1, 1, 1, k).expand(c, 1, 1, k)
        kv = g.view(1, 1, k, 1).expand(c, 1, k, 1)
        pad = k // 2
        out = nnf.conv2d(nnf.pad(batch, (pad, pad, 0, 0), mode="reflect"), kh, groups=c)
        out = nnf.conv2d(nnf.pad(out, (0, 0, pad, pad), mode="reflect"), kv, groups=c)
        return out.reshape(img.shape)


class RandomRotation(torch.nn.Module):
    def __init__(self, degrees, interpolation=InterpolationMode.NEAREST, expand=False,
                 center=None, fill=0):  # fmt: skip
        super().__init__()
        self.degrees = (-degrees, degrees) if isinstance(degrees, numbers.Number) else degrees

    def forward(self, img):
        img = _image(img)
        angle = math.radians(torch.empty(1).uniform_(*self.degrees).item())
        theta = torch.tensor(
            [[math.cos(angle), -math.sin(angle), 0.0], [math.sin(angle), math.cos(angle), 0.0]]
        )
        batch = img.unsqueeze(0)
        grid = nnf.affine_grid(theta.unsqueeze(0), list(batch.shape), align_corners=False)
        return nnf.grid_sample(batch, grid, align_corners=False).squeeze(0)
