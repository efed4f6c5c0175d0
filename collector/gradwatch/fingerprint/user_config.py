"""Turn a user's training config into plain JSON-able data, and hash it.

``normalize_config`` accepts what training scripts actually pass around: ``None``, a
mapping, an ``argparse.Namespace``, a dataclass instance (nested ones too) and, without
importing the libraries, OmegaConf/Hydra- or Hugging-Face-like objects that offer
``to_container()`` or ``to_dict()``. The result holds only dicts with string keys, lists,
str, int, float (NaN and ±Inf included: they are data), bool and None.

Values with no JSON form are kept as ``{"$repr": "<repr(value)>"}``, with memory
addresses such as ``at 0x7f3a…`` removed so that the same config hashes the same in
every process.

``config_hash`` is the SHA-256 of a canonical JSON text. Choices, so that replicate
grouping is strict rather than clever:

- key order never matters (keys are sorted);
- types matter: ``1``, ``1.0`` and ``True`` hash differently, as do ``0.0`` and ``-0.0``.
  A config that changed a value's type was edited, and a replicate launched the same way
  produces the same types;
- every NaN hashes the same (payload and sign are ignored); ``Infinity`` and
  ``-Infinity`` are distinct.

Example::

    >>> normalize_config(argparse.Namespace(lr=1e-3, out=Path("runs")))
    {'lr': 0.001, 'out': 'runs'}
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Set
from typing import Any

import torch

from gradwatch.core.errors import ConfigError

__all__ = ["REPR_KEY", "config_hash", "normalize_config"]

REPR_KEY = "$repr"
"""The key of the one-entry dict that stands for a value with no JSON form."""

_MAX_DEPTH = 64
_MAX_REPR = 1000
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_HASH_DOMAIN = b"gradwatch-config-v1\n"
_ACCEPTED = (
    "None, a mapping (dict), an argparse.Namespace, a dataclass instance, "
    "or an object with to_container() or to_dict() returning a mapping"
)


def normalize_config(config: object) -> dict[str, Any]:
    """Convert a training config into JSON-able data (see the module docstring).

    Raises ``ConfigError`` for anything that is not a config (a list, an int, …), for keys
    that are neither str nor int, for two keys that become the same string, and for
    cycles.

    Example::

        >>> @dataclasses.dataclass
        ... class Opt:
        ...     lr: float = 0.1
        >>> normalize_config({"opt": Opt(), 3: float("nan")})
        {'opt': {'lr': 0.1}, '3': nan}
    """
    if config is None:
        return {}
    mapping = _as_mapping(config)
    if mapping is None:
        raise ConfigError(
            f"config must be {_ACCEPTED}; got {type(config).__qualname__}: {_short_repr(config)}"
        )
    return _normalize_mapping(mapping, path="config", ancestors=[id(config)])


def config_hash(config: dict[str, Any]) -> str:
    """SHA-256 hex digest of ``config`` in canonical JSON (see the module docstring).

    ``config`` is normalised first, so a normalised and a raw config hash the same.

    Example::

        >>> config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})
        True
    """
    canonical = json.dumps(
        normalize_config(config),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=True,  # NaN, Infinity, -Infinity: unambiguous, never produced otherwise
    )
    return hashlib.sha256(_HASH_DOMAIN + canonical.encode("ascii")).hexdigest()


def _as_mapping(obj: object) -> Mapping[Any, Any] | None:
    """The mapping a container-like config stands for, or None if it is not one."""
    if isinstance(obj, Mapping):
        return obj
    if isinstance(obj, argparse.Namespace):
        return vars(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Not dataclasses.asdict: it deep-copies every value, which may fail or be slow.
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    for method in ("to_container", "to_dict"):
        convert = getattr(type(obj), method, None)
        if callable(convert):
            try:
                result = convert(obj)
            except Exception as e:
                raise ConfigError(
                    f"config {type(obj).__qualname__}.{method}() raised {e!r}; "
                    "pass a plain dict instead"
                ) from e
            if not isinstance(result, Mapping):
                raise ConfigError(
                    f"config {type(obj).__qualname__}.{method}() returned "
                    f"{type(result).__qualname__}, not a mapping; pass a plain dict instead"
                )
            return result
    return None


def _normalize_mapping(
    mapping: Mapping[Any, Any], *, path: str, ancestors: list[int]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        skey = _key(key, path)
        if skey in out:
            raise ConfigError(f"{path} has two keys that both become {skey!r}; rename one")
        out[skey] = _normalize(value, path=f"{path}.{skey}", ancestors=ancestors)
    return out


def _key(key: object, path: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, enum.Enum) and isinstance(key.value, str | int):
        return _key(key.value, path)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise ConfigError(
        f"{path} has a key of type {type(key).__qualname__} ({key!r}); "
        "config keys must be str or int"
    )


def _normalize(value: object, *, path: str, ancestors: list[int]) -> Any:
    if isinstance(value, enum.Enum):  # before int/str: IntEnum and StrEnum are both
        return _normalize(value.value, path=path, ancestors=ancestors)
    scalar = _scalar(value)
    if scalar is not _NOT_SCALAR:
        return scalar
    if id(value) in ancestors:
        raise ConfigError(f"{path} refers back to one of its parents (a cycle); break the cycle")
    if len(ancestors) >= _MAX_DEPTH:
        raise ConfigError(f"{path} is nested more than {_MAX_DEPTH} levels deep")
    ancestors.append(id(value))
    try:
        return _normalize_container(value, path=path, ancestors=ancestors)
    finally:
        ancestors.pop()


def _normalize_container(value: object, *, path: str, ancestors: list[int]) -> Any:
    mapping = _as_mapping(value)
    if mapping is not None:
        return _normalize_mapping(mapping, path=path, ancestors=ancestors)
    if isinstance(value, list | tuple):
        return [
            _normalize(v, path=f"{path}[{i}]", ancestors=ancestors) for i, v in enumerate(value)
        ]
    if isinstance(value, Set):
        items = [_normalize(v, path=f"{path}{{}}", ancestors=ancestors) for v in value]
        # Set iteration order depends on PYTHONHASHSEED; sort for a stable hash.
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    numpy_value = _numpy_value(value)
    if numpy_value is not _NOT_SCALAR:
        return _normalize(numpy_value, path=path, ancestors=ancestors)
    return {REPR_KEY: _short_repr(value)}


class _NotScalar:
    pass


_NOT_SCALAR: Any = _NotScalar()


def _scalar(value: object) -> Any:
    """The JSON scalar for ``value`` (subclasses become their base type), or ``_NOT_SCALAR``."""
    if value is None:
        return None
    for base in (bool, int, float, str):  # bool first: it is an int
        if isinstance(value, base):
            return base(value)
    if isinstance(value, os.PathLike):
        return os.fsdecode(os.fspath(value))
    if isinstance(value, torch.dtype | torch.device):
        return str(value)
    return _NOT_SCALAR


def _numpy_value(value: object) -> Any:
    """numpy scalars and small arrays as Python values, if numpy is already imported."""
    np = sys.modules.get("numpy")
    if np is None:
        return _NOT_SCALAR
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.size <= _MAX_REPR:
        return value.tolist()
    return _NOT_SCALAR


def _short_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception as e:
        text = f"<{type(value).__qualname__}: repr failed with {type(e).__name__}>"
    text = _ADDRESS.sub("", text)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 1] + "…"
