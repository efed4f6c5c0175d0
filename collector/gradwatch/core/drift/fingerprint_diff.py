"""What differs between two run fingerprints, and how exactly their values should agree.

The fingerprint's fields fall into sections that map onto the causes of drift, in the
order ARCHITECTURE.md decides them: ``environment`` (versions, devices, threads,
determinism flags, installed packages) → ``config`` → ``code`` → ``init`` (initial
parameters). ``seeds`` and ``host`` differences are listed as evidence but are no cause on
their own: a different seed shows up as different initial parameters or a different data
order, and the same computation on another host gives the same bits.

Example::

    >>> [d["field"] for d in fingerprint_diff({"device": {"num_threads": 1}},
    ...                                       {"device": {"num_threads": 2}})]
    ['device.num_threads']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CAUSE_SECTIONS",
    "Tolerance",
    "differing_sections",
    "expects_identical",
    "fingerprint_diff",
    "first_init_difference",
    "tolerance_for",
]

CAUSE_SECTIONS = ("environment", "config", "code", "init")
"""Sections whose difference is a cause, in the order causes are decided."""

_FIELDS: tuple[tuple[str, str], ...] = (
    ("versions.python", "environment"),
    ("versions.python_implementation", "environment"),
    ("versions.torch", "environment"),
    ("versions.cuda", "environment"),
    ("versions.hip", "environment"),
    ("versions.cudnn", "environment"),
    ("device.types", "environment"),
    ("device.devices", "environment"),
    ("device.gpus", "environment"),
    ("device.num_threads", "environment"),
    ("device.num_interop_threads", "environment"),
    ("device.stats_kernel", "environment"),
    ("packages_hash", "environment"),
    ("config_hash", "config"),
    ("code_hash", "code"),
    ("git.commit", "code"),
    ("git.diff_hash", "code"),
    ("script_hash", "code"),
    ("init_params_hash", "init"),
    ("seeds.torch_initial_seed", "seeds"),
    ("seeds.torch_rng_state_sha256", "seeds"),
    ("seeds.python_random_state_sha256", "seeds"),
    ("seeds.numpy_random_state_sha256", "seeds"),
    ("seeds.cuda_initial_seed", "seeds"),
    ("seeds.pythonhashseed", "seeds"),
    ("versions.platform", "host"),
    ("device.hostname", "host"),
    ("device.cpu_count", "host"),
)
_MISSING = object()


def _get(fp: dict[str, Any], dotted: str) -> Any:
    value: Any = fp
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def fingerprint_diff(fa: dict[str, Any], fb: dict[str, Any]) -> list[dict[str, Any]]:
    """The fields that differ, each ``{"field", "section", "a", "b"}``.

    A field missing from one fingerprint (an older collector, a slow phase that never
    arrived) is not a difference: unknown is not evidence. Determinism flags and the
    changed config keys are listed one by one.
    """
    out: list[dict[str, Any]] = []
    fields = list(_FIELDS)
    for section_name in ("determinism",):
        keys = set(_mapping(fa, section_name)) | set(_mapping(fb, section_name))
        fields += [(f"{section_name}.{k}", "environment") for k in sorted(keys)]
    for field, section in fields:
        a, b = _get(fa, field), _get(fb, field)
        if a is _MISSING or b is _MISSING or _same(a, b):
            continue
        out.append({"field": field, "section": section, "a": a, "b": b})
    if any(d["field"] == "config_hash" for d in out):
        ca, cb = _mapping(fa, "config"), _mapping(fb, "config")
        for key in sorted(set(ca) | set(cb)):
            a, b = ca.get(key), cb.get(key)
            if key not in ca or key not in cb or not _same(a, b):
                out.append({"field": f"config.{key}", "section": "config", "a": a, "b": b})
    return out


def _mapping(fp: dict[str, Any], key: str) -> dict[str, Any]:
    value = fp.get(key)
    return value if isinstance(value, dict) else {}


def differing_sections(diff: list[dict[str, Any]]) -> list[str]:
    """The cause sections present in ``diff``, in the order causes are decided."""
    present = {d["section"] for d in diff}
    return [s for s in CAUSE_SECTIONS if s in present]


def first_init_difference(fa: dict[str, Any], fb: dict[str, Any]) -> str | None:
    """The first parameter tensor whose initial checksum differs (listing order)."""
    a = {c.get("name"): c for c in fa.get("init_param_checksums") or [] if isinstance(c, dict)}
    for item in fb.get("init_param_checksums") or []:
        if isinstance(item, dict) and item.get("name") in a and not _same(a[item["name"]], item):
            return str(item["name"])
    return None


def expects_identical(fa: dict[str, Any], fb: dict[str, Any]) -> bool:
    """Whether the fingerprints say the two runs should agree bit for bit.

    Same seed (set by the user), same environment (versions, devices, threads, flags) and
    the same initial parameters, and deterministic kernels: CPU only, or deterministic
    algorithms on with cuDNN benchmarking off.
    """
    if differing_sections(fingerprint_diff(fa, fb)):
        return False
    for fp in (fa, fb):
        seeds, det = _mapping(fp, "seeds"), _mapping(fp, "determinism")
        if seeds.get("torch_seed_user_set") is not True:
            return False
        types = set(_mapping(fp, "device").get("types") or [])
        if types - {"cpu"} and (
            det.get("deterministic_algorithms") is not True or det.get("cudnn_benchmark") is True
        ):
            return False
    return bool(_get(fa, "seeds.torch_initial_seed") == _get(fb, "seeds.torch_initial_seed"))


@dataclass(frozen=True)
class Tolerance:
    """Two values agree when ``|a - b| <= atol + rtol * max(|a|, |b|)`` (NaN equals NaN)."""

    rtol: float
    atol: float

    def as_dict(self) -> dict[str, float]:
        """The JSON form."""
        return {"rtol": self.rtol, "atol": self.atol}


EXACT = Tolerance(0.0, 0.0)
_RTOL = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2}
_ACCELERATOR_FACTOR = 10.0  # accelerator kernels reorder sums more freely than the CPU


def tolerance_for(
    fa: dict[str, Any], fb: dict[str, Any], *, rtol: float | None = None, atol: float | None = None
) -> Tolerance:
    """Exact when the fingerprints say bit-identical, else a dtype- and device-aware one.

    The relative tolerance follows the least precise parameter dtype of either run
    (float32 1e-6, float16 1e-3, bfloat16 1e-2, float64 1e-12), ×10 when either ran on an
    accelerator; ``rtol`` / ``atol`` override it (and apply even to bit-identical pairs).
    """
    if rtol is None and atol is None and expects_identical(fa, fb):
        return EXACT
    dtypes = {
        str(c.get("dtype", "")).removeprefix("torch.")
        for fp in (fa, fb)
        for c in fp.get("init_param_checksums") or []
        if isinstance(c, dict)
    }
    base = max((_RTOL[d] for d in dtypes if d in _RTOL), default=_RTOL["float32"])
    types = {t for fp in (fa, fb) for t in _mapping(fp, "device").get("types") or []}
    if types - {"cpu"}:
        base *= _ACCELERATOR_FACTOR
    rtol = base if rtol is None else rtol
    return Tolerance(rtol, (0.0 if rtol == 0.0 else 1e-12) if atol is None else atol)
