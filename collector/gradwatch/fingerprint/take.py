"""The reproducibility fingerprint of a training run, taken at ``watch()``.

Two phases, because ``watch()`` must return within 100 ms:

- ``collect_fast`` (training thread): seeds and RNG-state hashes, determinism flags,
  versions, devices, the config and its hash, and a bit-exact hash of the initial
  parameters computed on their device with one device→host transfer per device.
- ``provenance.collect_slow`` (background thread, about a second): git state, installed
  packages, the script, and ``code_hash``.

Replicates are grouped on ``(config_hash, code_hash)``. ``code_hash`` is the SHA-256 of
``[git commit, git diff hash, script hash]``: the committed code, the uncommitted changes
to tracked files, and the script that was run (which may itself be untracked). Other
untracked files are hashed apart (``git.untracked_hash``) and kept out of ``code_hash``,
because runs write logs and checkpoints into un-ignored folders and would otherwise never
be replicates of each other.

Nothing here draws from or reseeds any RNG, or changes a flag, a module or a tensor:
states are only read, and numpy is inspected only if the user already imported it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import socket
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from gradwatch.core.errors import ConfigError
from gradwatch.fingerprint.user_config import config_hash
from gradwatch.session import quietproc
from gradwatch.stats import hostnorms

__all__ = ["collect_fast", "nondeterminism_risks", "tensor_checksums"]

SEED_USER_SET_BELOW = 2**32
"""Seeds below this look user-set; torch's own start-up seed is a random 64-bit value."""

_WIDTH = 256  # int64 words per row of the on-device reduction
_INT_VIEWS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_MASK64 = (1 << 64) - 1


def collect_fast(
    params: Sequence[torch.Tensor],
    *,
    config: dict[str, Any],
    names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The part of the fingerprint that is cheap enough for the training thread.

    ``config`` is already normalised (``normalize_config``). ``names`` label the
    parameters (e.g. from ``model.named_parameters()``); by default their indices.

    Example::

        >>> fp = collect_fast(list(model.parameters()), config={"lr": 0.1})
        >>> fp["seeds"]["torch_seed_user_set"], len(fp["init_params_hash"])
        (True, 64)
    """
    tensors = list(params)
    labels = [str(i) for i in range(len(tensors))] if names is None else list(names)
    if len(labels) != len(tensors):
        raise ConfigError(f"got {len(labels)} names for {len(tensors)} parameters")
    checksums = [
        {"name": name, "shape": list(t.shape), "dtype": str(t.dtype), "checksum": _hex(pair)}
        for name, t, pair in zip(labels, tensors, tensor_checksums(tensors), strict=True)
    ]
    return {
        "seeds": _seeds(),
        "determinism": _determinism(),
        "versions": _versions(),
        "device": _device(tensors),
        "config": config,
        "config_hash": config_hash(config),
        # Devices are left out: the same values on CPU and GPU are the same initialisation.
        "init_params_hash": _sha256(json.dumps(checksums, separators=(",", ":")).encode()),
        "init_param_checksums": checksums,
    }


@torch.no_grad()
def tensor_checksums(tensors: Sequence[torch.Tensor]) -> list[tuple[int, int] | None]:
    """Bit-exact ``(sum, position-weighted sum)`` of each tensor, as unsigned 64-bit ints.

    The tensor's bytes are read as little-endian int64 words (the last < 8 bytes as
    integers of the element size) and summed on the tensor's device. int64 wrap-around
    makes the sums exact and independent of reduction order, and a single flipped bit
    changes the plain sum; the weighted sum (word i weighs i + 1) catches reordering.
    The words are reduced as a ``[rows, 256]`` matrix along both axes, which needs no
    temporary of the tensor's size. One device→host transfer per device; ``None`` for
    tensors without readable data (meta, sparse, quantized, lazy).
    """
    result: list[tuple[int, int] | None] = [None] * len(tensors)
    by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for i, tensor in enumerate(tensors):
        try:
            sums = _device_sums(tensor)
        except RuntimeError:  # a tensor subclass or backend without these ops
            sums = None
        if sums is not None:
            by_device.setdefault(sums.device, []).append((i, sums))
    for entries in by_device.values():
        host = torch.stack([sums for _, sums in entries]).cpu().tolist()
        for (i, _), (total, weighted) in zip(entries, host, strict=True):
            result[i] = (total & _MASK64, weighted & _MASK64)
    return result


def _device_sums(tensor: torch.Tensor) -> torch.Tensor | None:
    split = _as_words(tensor)
    if split is None:
        return None
    words, tail = split
    rows = words.numel() // _WIDTH
    start, device = rows * _WIDTH, words.device
    rest = torch.cat((words[start:], tail))  # fewer than _WIDTH + 8 values
    total = rest.sum()
    weighted = rest.mul(torch.arange(start + 1, start + 1 + rest.numel(), device=device)).sum()
    if rows:  # word (r, c) of the matrix weighs r * _WIDTH + c + 1
        body = words[:start].view(rows, _WIDTH)
        row_sums, col_sums = body.sum(1), body.sum(0)
        total = total + row_sums.sum()
        weighted = weighted + _WIDTH * row_sums.mul(torch.arange(rows, device=device)).sum()
        weighted = weighted + col_sums.mul(torch.arange(1, _WIDTH + 1, device=device)).sum()
    return torch.stack((total, weighted))


def _as_words(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The tensor's bytes as int64 words plus its last < 8 bytes as widened elements."""
    if tensor.is_meta or tensor.layout != torch.strided or tensor.is_quantized:
        return None
    if torch.nn.parameter.is_lazy(tensor):
        return None
    flat = tensor.detach().reshape(-1)  # copies only a non-contiguous tensor
    size = flat.element_size()
    if size % 8 == 0:
        return flat.view(torch.int64), flat.new_empty(0, dtype=torch.int64)
    if size not in _INT_VIEWS:
        return None
    ints = flat.view(_INT_VIEWS[size])
    if ints.storage_offset() * size % 8:  # an int64 view must start on an 8-byte boundary
        ints = ints.clone()
    whole = ints.numel() - ints.numel() % (8 // size)
    return ints[:whole].view(torch.int64), ints[whole:].to(torch.int64)


def _hex(pair: tuple[int, int] | None) -> str | None:
    return None if pair is None else f"{pair[0]:016x}{pair[1]:016x}"


def _seeds() -> dict[str, Any]:
    seed = torch.initial_seed()
    out: dict[str, Any] = {
        "torch_initial_seed": seed,
        # torch seeds itself at start-up with a random 64-bit value, which is below 2**32
        # with probability 2**-32; manual_seed(42), seed_everything() etc. are below it.
        "torch_seed_user_set": seed < SEED_USER_SET_BELOW,
        "torch_rng_state_sha256": _hash_state(torch.get_rng_state()),
        "python_random_state_sha256": _hash_state(random.getstate()),
        "numpy_random_state_sha256": None,
        "cuda_initial_seed": None,
        "cuda_rng_states_sha256": None,
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
    }
    np_random = sys.modules.get("numpy.random")  # never import numpy ourselves
    if np_random is not None:
        out["numpy_random_state_sha256"] = _hash_state(np_random.get_state(legacy=False))
    if _cuda_initialized():  # never initialise CUDA ourselves
        out["cuda_initial_seed"] = _read(torch.cuda.initial_seed)
        out["cuda_rng_states_sha256"] = _read(lambda: _hash_state(torch.cuda.get_rng_state_all()))
    return out


def _hash_state(state: object) -> str:
    """SHA-256 of an RNG state made of tensors, arrays, tuples, lists, dicts and scalars."""
    digest = hashlib.sha256()

    def feed(value: object) -> None:
        if isinstance(value, torch.Tensor):
            digest.update(bytes(value.detach().cpu().view(torch.uint8).reshape(-1).tolist()))
        elif hasattr(value, "tobytes"):  # a numpy array
            digest.update(repr((value.dtype, value.shape)).encode())  # type: ignore[attr-defined]
            digest.update(value.tobytes())
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                feed(str(key))
                feed(value[key])
        elif isinstance(value, list | tuple):
            digest.update(f"[{len(value)}".encode())
            for item in value:
                feed(item)
        else:
            digest.update(f"{type(value).__name__}:{value!r};".encode())

    feed(state)
    return digest.hexdigest()


def _determinism() -> dict[str, Any]:
    cudnn: Any = torch.backends.cudnn
    matmul: Any = torch.backends.cuda.matmul
    readers: dict[str, Callable[[], object]] = {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled,
        "cudnn_deterministic": lambda: cudnn.deterministic,
        "cudnn_benchmark": lambda: cudnn.benchmark,
        "cudnn_enabled": lambda: cudnn.enabled,
        # The legacy TF32 flags raise once the new fp32_precision API was used: read both.
        "cuda_matmul_allow_tf32": lambda: matmul.allow_tf32,
        "cudnn_allow_tf32": lambda: cudnn.allow_tf32,
        "cuda_matmul_fp32_precision": lambda: matmul.fp32_precision,
        "cudnn_conv_fp32_precision": lambda: cudnn.conv.fp32_precision,
        "float32_matmul_precision": torch.get_float32_matmul_precision,
    }
    out = {key: _read(read) for key, read in readers.items()}
    out["cublas_workspace_config"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    return out


def _silent(*args: Any, **kwargs: Any) -> None:
    return None


def _read(read: Callable[[], object]) -> Any:
    """A value that this torch may lack or refuse to give: None then, never an exception.

    A deprecation warning from reading a setting is not the script's: it is not shown.
    Not with ``warnings.catch_warnings()``, which resets every module's show-once record
    (the script's earlier warnings would print again); only the display is swapped."""
    shown = warnings.showwarning
    warnings.showwarning = _silent
    try:
        value = read()
    except Exception:
        return None
    finally:
        warnings.showwarning = shown
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def _platform() -> str:
    quietproc.prime_platform()  # platform() reads uname -p, run by bare name otherwise
    return platform.platform()


def _versions() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        # Only once CUDA is initialised: is_available() alone may take seconds on some hosts.
        "cudnn": _read(torch.backends.cudnn.version) if _cuda_initialized() else None,
        "platform": _platform(),
    }


def _device(tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
    devices = {t.device for t in tensors}
    cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})
    return {
        "types": sorted({d.type for d in devices}),
        "devices": sorted(str(d) for d in devices),
        "gpus": [_gpu(i) for i in cuda],
        "gpu_count": _read(torch.cuda.device_count) if cuda else None,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        # how parameter and update norms are summed on the host (gradwatch.stats.hostnorms): the
        # fused kernel and the stock ops round differently
        "stats_kernel": (
            hostnorms.status() if tensors and all(t.device.type == "cpu" for t in tensors) else None
        ),
        "cpu_count": os.cpu_count(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


def _gpu(index: int) -> dict[str, Any]:
    capability = _read(lambda: ".".join(map(str, torch.cuda.get_device_capability(index))))
    return {
        "index": index,
        "name": _read(lambda: torch.cuda.get_device_name(index)),
        "capability": capability,
    }


def _cuda_initialized() -> bool:
    return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_RISKS = {  # field: (why, fix)
    "determinism.deterministic_algorithms": (
        "accelerator kernels (atomic adds, algorithm choice) may sum in a different order "
        "on every run",
        "call torch.use_deterministic_algorithms(True)",
    ),
    "determinism.cudnn_benchmark": (
        "cuDNN benchmarking picks the fastest convolution algorithm anew on every run, "
        "and different algorithms round differently",
        "set torch.backends.cudnn.benchmark = False",
    ),
    "seeds.torch_seed_user_set": (
        "torch's seed is a random 64-bit value: initialisation, dropout and shuffling "
        "differ on every run",
        "call torch.manual_seed(<seed>) before building the model",
    ),
    "determinism.float32_matmul_precision": (
        "float32 matmuls run in TF32, whose results differ between GPU generations",
        "torch.backends.cuda.matmul.fp32_precision = 'ieee' (older torch: "
        "torch.set_float32_matmul_precision('highest'))",
    ),
    "determinism.cublas_workspace_config": (
        "cuBLAS is deterministic only with a fixed workspace; without one torch raises, "
        "or in warn-only mode runs nondeterministically",
        "export CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python",
    ),
}


def nondeterminism_risks(fp: dict[str, Any]) -> list[dict[str, str]]:
    """Settings in a fingerprint that make replicates differ (check ``nondeterminism-risk``).

    Each risk is ``{"field", "value", "why", "fix"}`` with ``value`` as JSON text. Works on
    a fingerprint read back from JSON; missing sections count as unknown, not as risks.
    Unseeded DataLoader workers cannot be read from a fingerprint.

    Example::

        >>> [r["field"] for r in nondeterminism_risks({"seeds": {"torch_seed_user_set": False}})]
        ['seeds.torch_seed_user_set']
    """
    seeds, det = fp.get("seeds") or {}, fp.get("determinism") or {}
    types = set((fp.get("device") or {}).get("types") or [])
    cuda, deterministic = "cuda" in types, det.get("deterministic_algorithms")
    tf32 = (
        det.get("cuda_matmul_allow_tf32") is True
        or det.get("cuda_matmul_fp32_precision") == "tf32"
        or det.get("float32_matmul_precision") in ("high", "medium")
    )
    applies = {
        "determinism.deterministic_algorithms": bool(types - {"cpu", "meta"})
        and deterministic is False,
        "determinism.cudnn_benchmark": cuda and det.get("cudnn_benchmark") is True,
        "seeds.torch_seed_user_set": seeds.get("torch_seed_user_set") is False,
        "determinism.float32_matmul_precision": cuda and tf32,
        "determinism.cublas_workspace_config": cuda
        and deterministic is True
        and not det.get("cublas_workspace_config"),
    }
    return [
        {"field": field, "value": _field_value(fp, field), "why": why, "fix": fix}
        for field, (why, fix) in _RISKS.items()
        if applies[field]
    ]


def _field_value(fp: dict[str, Any], field: str) -> str:
    section, key = field.split(".")
    return json.dumps((fp.get(section) or {}).get(key))
