"""``torchvision.transforms.transforms``, where torchvision defines its transform classes
(some programs import them from here): the same classes as the package."""

from torchvision.transforms import *  # noqa: F403
from torchvision.transforms import __all__  # noqa: F401
