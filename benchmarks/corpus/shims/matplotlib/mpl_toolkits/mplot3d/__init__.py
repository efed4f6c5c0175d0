"""No-op 3-D axes (see the matplotlib shim)."""

from matplotlib import Anything as Axes3D

__all__ = ["Axes3D"]
