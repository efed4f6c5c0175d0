"""The key of a replicate group (runs of one project with the same config and code hash):
``"<config_hash>:<code_hash>"``, ``none`` for a missing code hash.

Pure functions shared by the read side (:mod:`gradwatch_server.read.groups`), live drift and
alert rules, which match a finding's run by its group.
"""

from __future__ import annotations

from gradwatch_server.exceptions import RequestError

NONE = "none"


def group_key(config_hash: str | None, code_hash: str | None) -> str | None:
    """The group key of a run; None before its config hash is known."""
    return None if config_hash is None else f"{config_hash}:{code_hash or NONE}"


def parse_key(key: str) -> tuple[str, str | None]:
    """``(config_hash, code_hash)`` of a key, or 422 saying what a key looks like."""
    config, sep, code = key.rpartition(":")
    if not sep or not config or not code:
        raise RequestError(
            422, f"bad group key {key[:80]!r}: it is '<config_hash>:<code_hash>' as in GET /groups"
        )
    return config, None if code == NONE else code
