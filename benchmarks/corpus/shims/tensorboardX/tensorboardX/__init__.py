# ruff: noqa: N999 (the package is named as the one it stands in for)
"""A no-op stand-in for `tensorboardX` (not installed here): its `SummaryWriter` is the
`tensorboard` shim's, which takes every logging call, keeps nothing and creates its log
folder like the real one."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tensorboard"))
from tensorboard import FileWriter, SummaryWriter

__version__ = "2.6.2"
__all__ = ["FileWriter", "SummaryWriter"]
