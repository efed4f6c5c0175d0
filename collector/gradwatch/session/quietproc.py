"""Child processes that leave the script's warnings alone.

``subprocess`` looks up a command given by bare name with ``os.get_exec_path()``, which
enters ``warnings.catch_warnings()``; entering and leaving it marks the warning filters
as changed, and Python then forgets which warnings were already shown, so every
show-once warning the script printed before prints again. gradwatch therefore runs its
commands by absolute path, and fills ``platform``'s cache of ``uname -p`` (which it
would otherwise run by bare name) the same way.
"""

from __future__ import annotations

import platform
import shutil
import subprocess


def command(name: str) -> str:
    """``name`` as an absolute path when it is on ``PATH`` (else as given)."""
    return shutil.which(name) or name


_primed = False


def prime_platform() -> None:
    """Give ``platform.uname().processor`` its value without a bare-name subprocess."""
    global _primed
    if _primed:
        return
    _primed = True
    uname = platform.uname()
    if "processor" in vars(uname):
        return  # already computed
    found = shutil.which("uname")
    value = ""
    if found:
        try:
            value = subprocess.check_output(
                [found, "-p"], stderr=subprocess.DEVNULL, text=True, timeout=5
            ).strip()
        except (OSError, subprocess.SubprocessError):
            value = ""
    # as platform does: "unknown" (uname -p on Linux) reads as empty
    vars(uname)["processor"] = "" if value == "unknown" else value
