"""API tokens: per project, scope ``write`` (collectors) or ``read`` (dashboards, CLI).

Only a token's SHA-256 is stored. On loopback no token is needed; a server bound to any
other address requires one on every request (``Settings.require_tokens``): no, an unknown
or a revoked token is 401, a token of another project or scope is 403. Tokens are listed
(``list_tokens``: id, project, scope, dates, never the secret) and revoked by id or by
secret (``revoke_token``); a revoked token is refused from the next request on.

Example::

    with write_session(engine) as s:
        secret = create_token(s, project="vision", scope="write")   # print it once
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session, col

from gradwatch_server.exceptions import RequestError
from gradwatch_server.models import Project, Token
from gradwatch_server.store import ensure_project

SCOPES = ("read", "write")
PREFIX = "gw_"


@dataclass(frozen=True)
class Access:
    """Who is calling: ``project`` None means any project (no tokens required)."""

    project: str | None
    scope: str | None

    def sees(self, project: str) -> bool:
        """Whether this caller may know that an object of ``project`` exists."""
        return self.project is None or self.project == project

    def check(self, project: str, scope: str) -> None:
        """403 unless this caller may use ``scope`` on ``project``."""
        if self.project is None:
            return
        if self.project != project or self.scope != scope:
            raise RequestError(
                403,
                f"this token is a {self.scope} token of project {self.project!r}; "
                f"this request needs a {scope} token of project {project!r}",
            )


OPEN = Access(None, None)


def digest(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def create_token(session: Session, *, project: str, scope: str) -> str:
    """Create a token and return its secret (shown once, never stored)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    secret = PREFIX + secrets.token_urlsafe(32)
    project_id = ensure_project(session, project)
    session.add(
        Token(project_id=project_id, scope=scope, digest=digest(secret), created_at=time.time())
    )
    return secret


def count_tokens(session: Session) -> int:
    """How many tokens exist (a non-loopback server refuses to start with none)."""
    return int(session.execute(select(func.count()).select_from(Token)).scalar_one())


def list_tokens(session: Session, project: str | None = None) -> list[dict[str, Any]]:
    """Every token (oldest first): id, project, scope, created_at, revoked_at, digest prefix."""
    query = (
        select(Token, col(Project.name))
        .join(Project, col(Project.id) == col(Token.project_id))
        .order_by(col(Token.id))
    )
    if project is not None:
        query = query.where(col(Project.name) == project)
    return [
        {
            "id": token.id,
            "project": name,
            "scope": token.scope,
            "created_at": token.created_at,
            "revoked_at": token.revoked_at,
            "digest": token.digest[:12],
        }
        for token, name in session.execute(query).all()
    ]


def revoke_token(session: Session, which: str) -> dict[str, Any]:
    """Revoke the token with id ``which`` (digits) or secret ``which`` (``gw_...``).

    Returns the token's listing entry; raises ``LookupError`` when there is no such token.
    Revoking a revoked token keeps its first revocation time.
    """
    key = which.strip()
    clause = col(Token.id) == int(key) if key.isdigit() else col(Token.digest) == digest(key)
    token = session.execute(select(Token).where(clause)).scalars().first()
    if token is None:
        raise LookupError(
            f"no token {key[:16]!r}: give the id shown by --list-tokens or the token itself"
        )
    if token.revoked_at is None:
        token.revoked_at = time.time()
        session.add(token)
        session.flush()
    return next(t for t in list_tokens(session) if t["id"] == token.id)


def authenticate(session: Session, authorization: str | None) -> Access:
    """The caller behind an ``Authorization: Bearer <token>`` header, or 401."""
    if not authorization:
        raise RequestError(
            401, "this server requires an API token: send 'Authorization: Bearer <token>'"
        )
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise RequestError(401, "the Authorization header must be 'Bearer <token>'")
    row = session.execute(
        select(col(Token.scope), col(Project.name), col(Token.revoked_at))
        .join(Project, col(Project.id) == col(Token.project_id))
        .where(col(Token.digest) == digest(token.strip()))
    ).first()
    if row is None:
        raise RequestError(401, "unknown API token; create one with gradwatch serve --create-token")
    if row[2] is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(row[2])))
        raise RequestError(
            401, f"this API token was revoked on {when}; ask for a new one (--create-token)"
        )
    return Access(project=str(row[1]), scope=str(row[0]))
