"""Validation of the options of :func:`gradwatch.watch`, resolved once at setup.

Every problem is reported here, with what was received and how to fix it, so that
nothing about the options can fail later inside a training step.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from gradwatch.core import checkids, paths
from gradwatch.core.catalogue import CHECKPOINT_CHECKS, CHECKS, DEFAULT_POLICY, POLICIES, Policy
from gradwatch.core.contract import DEFAULT_PROJECT
from gradwatch.core.errors import ConfigError
from gradwatch.fingerprint.user_config import config_hash, normalize_config

CHECKS_ENV = "GRADWATCH_CHECKS"


@dataclass(frozen=True)
class WatchOptions:
    """The validated options of one run (see :func:`gradwatch.watch` for their meaning)."""

    project: str
    name: str | None
    config: dict[str, Any]
    config_hash: str
    tags: tuple[str, ...]
    accumulation_steps: int | None
    every: int
    checks: dict[str, Policy]
    server: str | None
    token: str | None
    data_dir: Path
    transfer_every: int | None
    batch_checksum: bool
    allow_mutation: tuple[str, ...] = ()
    scaler: Any = None
    ddp_every: int = 50
    extra: dict[str, Any] = field(default_factory=dict)
    nan_origin: bool = True  # $GRADWATCH_NAN_ORIGIN: NaN provenance (gradwatch.nan.origin)
    stats: str = "all"  # "all" or "grad-norms" (no snapshot, parameter or update norms)

    def policy(self, check: str) -> Policy:
        """The policy in force for ``check``."""
        return self.checks.get(check, DEFAULT_POLICY)


def parse_checks(spec: str, *, source: str) -> dict[str, Policy]:
    """Parse ``"stale-grad=raise,loss-plateau=off"`` (the env var and CLI syntax)."""
    out: dict[str, Policy] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        check, sep, policy = item.partition("=")
        if not sep:
            raise ConfigError(f"{source}: expected CHECK=POLICY, got {item!r}")
        out.update(_validate_checks({check.strip(): policy.strip()}, source=source))
    return out


def _validate_checks(checks: Mapping[Any, Any], *, source: str) -> dict[str, Policy]:
    out: dict[str, Policy] = {}
    for check, policy in checks.items():
        if check != "all" and check not in CHECKS:
            raise ConfigError(
                f"{source}: unknown check id {check!r}; known ids: {', '.join(sorted(CHECKS))} "
                "(or 'all')"
            )
        if policy not in POLICIES:
            raise ConfigError(
                f"{source}: policy for {check!r} must be one of {', '.join(POLICIES)}, "
                f"got {policy!r}"
            )
        if policy == "checkpoint" and check != "all" and check not in CHECKPOINT_CHECKS:
            raise ConfigError(
                f"{source}: policy 'checkpoint' is not available for {check!r}: it runs after "
                "the update, so there is no last good state to save; checkpoint works for "
                f"{', '.join(sorted(CHECKPOINT_CHECKS))} (use raise or warn for {check!r})"
            )
        out[check] = cast(Policy, policy)
    if "all" in out:
        every = out.pop("all")
        # all=checkpoint: checkpoint where it applies, raise for the checks that run later
        every_check: dict[str, Policy] = {
            c: "raise" if every == "checkpoint" and c not in CHECKPOINT_CHECKS else every
            for c in CHECKS
        }
        out = {**every_check, **out}
    return out


def _positive_int(name: str, value: object, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _text(name: str, value: object, *, allow_none: bool) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise ConfigError(
            f"{name} must be a non-empty string of at most 200 characters, got {value!r}"
        )
    return value


def _tags(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"tags must be a list of strings, got {value!r}")
    tags = tuple(value)
    for tag in tags:
        _text("each tag", tag, allow_none=False)
    return tags


def _server(value: object) -> str | None:
    server = value if value is not None else os.environ.get("GRADWATCH_SERVER") or None
    if server is None:
        return None
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        raise ConfigError(
            f"server must be an http:// or https:// URL such as http://127.0.0.1:8765, "
            f"got {server!r}"
        )
    return server.rstrip("/")


def _accumulation(value: object) -> int | None:
    """``accumulation_steps``, else ``$GRADWATCH_ACCUMULATION_STEPS`` (for ``gradwatch run``)."""
    if value is None:
        env = os.environ.get("GRADWATCH_ACCUMULATION_STEPS")
        if not env:
            return None
        if not env.isdigit():
            raise ConfigError(
                f"$GRADWATCH_ACCUMULATION_STEPS must be a positive integer, got {env!r}"
            )
        value = int(env)
    return _positive_int("accumulation_steps", value, allow_none=True)


def _nan_origin() -> bool:
    """``$GRADWATCH_NAN_ORIGIN``: on unless ``0``/``off``/``false``."""
    value = os.environ.get("GRADWATCH_NAN_ORIGIN", "1").strip().lower()
    if value not in ("1", "on", "true", "0", "off", "false", ""):
        raise ConfigError(f"$GRADWATCH_NAN_ORIGIN must be 1 or 0 (on or off), got {value!r}")
    return value not in ("0", "off", "false")


STATS_MODES = ("all", "grad-norms")
#: checks that read parameter or update norms, which ``stats="grad-norms"`` does not measure
NEEDS_PARAM_STATS = (
    checkids.NONFINITE_PARAM,
    checkids.UPDATE_RATIO,
    checkids.PARAM_NOT_UPDATED,
    checkids.FROZEN_PARAM_CHANGED,
    checkids.PARAM_MUTATED_OUTSIDE_STEP,
)


def _stats(value: object, policies: dict[str, Policy]) -> str:
    """``stats`` (``"all"`` or ``"grad-norms"``); in ``grad-norms`` mode the checks that need
    parameter or update norms are off, and asking for one of them is an error."""
    if value not in STATS_MODES:
        raise ConfigError(f"stats must be one of {', '.join(STATS_MODES)}, got {value!r}")
    if value == "grad-norms":
        asked = [c for c in NEEDS_PARAM_STATS if policies.get(c, "off") != "off"]
        if asked:
            raise ConfigError(
                f"stats='grad-norms' measures no parameter or update norms, which "
                f"{', '.join(asked)} need: use stats='all' or set those checks to 'off'"
            )
        for check in NEEDS_PARAM_STATS:
            policies[check] = "off"
    return str(value)


def _ddp_every(value: object) -> int:
    """``ddp_every``, else ``$GRADWATCH_DDP_EVERY`` (for ``gradwatch run``), else 50."""
    if value is None:
        env = os.environ.get("GRADWATCH_DDP_EVERY")
        if not env:
            return 50
        if not env.isdigit():
            raise ConfigError(f"$GRADWATCH_DDP_EVERY must be a positive integer, got {env!r}")
        value = int(env)
    return _positive_int("ddp_every", value) or 50


def resolve(
    *,
    project: object = None,
    name: object = None,
    config: object = None,
    tags: object = None,
    accumulation_steps: object = None,
    every: object = 1,
    checks: object = None,
    server: object = None,
    token: object = None,
    data_dir: object = None,
    transfer_every: object = None,
    batch_checksum: object = True,
    allow_mutation: object = None,
    scaler: object = None,
    ddp_every: object = None,
    stats: object = "all",
) -> WatchOptions:
    """Validate everything and fill defaults from the environment."""
    policies = parse_checks(os.environ.get(CHECKS_ENV, ""), source=f"${CHECKS_ENV}")
    if checks is not None:
        if not isinstance(checks, Mapping):
            raise ConfigError(f"checks must be a dict of check id -> policy, got {checks!r}")
        policies.update(_validate_checks(checks, source="checks"))
    if data_dir is not None and not isinstance(data_dir, str | os.PathLike):
        raise ConfigError(f"data_dir must be a path, got {data_dir!r}")
    if not isinstance(batch_checksum, bool):
        raise ConfigError(f"batch_checksum must be True or False, got {batch_checksum!r}")
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise ConfigError(f"scaler must be a torch.amp.GradScaler, got {scaler!r:.200}")
    tok = token if token is not None else os.environ.get("GRADWATCH_TOKEN") or None
    normal = normalize_config(config)
    mode = _stats(stats, policies)
    return WatchOptions(
        project=_text(
            "project",
            project
            if project is not None
            else os.environ.get("GRADWATCH_PROJECT", DEFAULT_PROJECT),
            allow_none=False,
        )
        or "",
        name=_text(
            "name", name if name is not None else os.environ.get("GRADWATCH_NAME"), allow_none=True
        ),
        config=normal,
        config_hash=config_hash(normal),
        tags=_tags(tags),
        accumulation_steps=_accumulation(accumulation_steps),
        every=_positive_int("every", every) or 1,
        checks=policies,
        server=_server(server),
        token=_text("token", tok, allow_none=True),
        data_dir=paths.data_dir(cast("str | os.PathLike[str] | None", data_dir)),
        transfer_every=_positive_int("transfer_every", transfer_every, allow_none=True),
        batch_checksum=batch_checksum,
        allow_mutation=_tags(allow_mutation) if allow_mutation is not None else (),
        scaler=scaler,
        nan_origin=_nan_origin(),
        ddp_every=_ddp_every(ddp_every),
        stats=mode,
    )


#: the option names of ``watch()`` (its keyword-only parameters; a test keeps them equal)
OPTIONS: frozenset[str] = frozenset(resolve.__kwdefaults__ or {})
