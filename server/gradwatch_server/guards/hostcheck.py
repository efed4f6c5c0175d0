"""ASGI guard against DNS rebinding and cross-site writes: the ``Host`` and ``Origin`` checks.

A web page can point its own name at 127.0.0.1 (DNS rebinding) and then read a loopback
server as if it were its own site: the browser sends the page's name as ``Host``. So the
server answers only ``Host`` values it serves, before any route runs (400 otherwise):

- loopback names and addresses (``localhost``, ``127.0.0.0/8``, ``[::1]``), any port: a
  browser sends them only for pages of this machine's own loopback addresses, and the
  dashboard's callbacks ask the API at one of them;
- the bind address itself; on a wildcard bind (``0.0.0.0``, ``::``) any IP address (a
  rebinding page always has a name, never an address);
- the names in ``Settings.allowed_hosts`` (``gradwatch serve --allowed-host NAME``,
  ``GRADWATCH_ALLOWED_HOSTS=a,b``): the names browsers and collectors use to reach the
  server, e.g. a reverse proxy's public name; ``*`` turns the check off.

A state-changing request (``POST``, ``PUT``, ``PATCH``, ``DELETE``: API writes, dashboard
callbacks, ``/login``) whose ``Origin`` names another host (or is ``null``) is refused with
403, so a page of another site cannot create alert rules through the visitor's browser.
Requests without ``Origin`` (collectors, ``curl``, the dashboard's own API calls) pass.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.settings import ALLOWED_HOSTS_ENV, parse_allowed_hosts

__all__ = ["ALLOWED_HOSTS_ENV", "HostCheck", "HostPolicy", "host_name", "parse_allowed_hosts"]

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_WILDCARD_BINDS = ("0.0.0.0", "::", "")


def host_name(value: str) -> str:
    """The host of a ``Host`` header value or an allowed-host entry: lower case, without
    its port, brackets or a trailing dot (``[::1]:8765`` → ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class HostPolicy:
    """Which ``Host`` (and ``Origin`` host) names a server bound to ``bind`` answers."""

    def __init__(self, bind: str, allowed: Iterable[str] = ()) -> None:
        names = {host_name(a) for a in allowed}
        self.any = "*" in names
        self.bind = host_name(bind) if ":" not in bind.strip("[]") else bind.strip("[]").lower()
        self.wildcard_bind = self.bind in _WILDCARD_BINDS
        self.names = names - {"*"}

    def allows(self, host: str) -> bool:
        """True when the host name (no port) is one this server serves."""
        if self.any or host in self.names or host == "localhost" or host == self.bind:
            return True
        address = _ip(host)
        if address is None:
            return False
        return address.is_loopback or self.wildcard_bind or address == _ip(self.bind)

    def hint(self) -> str:
        """What to do about a refused name."""
        return (
            "if this is the name you reach the server by, start it with "
            f"`gradwatch serve --allowed-host NAME` (or {ALLOWED_HOSTS_ENV}=NAME)"
        )


class HostCheck:
    """Wraps an ASGI app; see the module docstring."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 400 for a foreign ``Host``, 403 for a write from a foreign ``Origin``."""
        if scope["type"] not in ("http", "websocket") or self.policy.any:
            await self.app(scope, receive, send)
            return
        host_header = origin = None
        for key, value in scope.get("headers") or ():
            if key == b"host":
                host_header = value
            elif key == b"origin":
                origin = value
        if host_header is not None:
            host = host_name(host_header.decode("latin-1"))
            if not self.policy.allows(host):
                why = (
                    f"this server does not serve the host name {host[:100]!r} (Host header), "
                    f"which protects it from DNS rebinding; {self.policy.hint()}"
                )
                await _refuse(scope, receive, send, 400, why)
                return
        if origin is not None and scope.get("method", "GET") in WRITE_METHODS:
            text = origin.decode("latin-1").strip()
            origin_host = (urllib.parse.urlsplit(text).hostname or "") if text != "null" else ""
            if not origin_host or not self.policy.allows(host_name(origin_host)):
                why = (
                    f"refusing a {scope.get('method')} request from the web page of another "
                    f"site (Origin {text[:100]!r}); {self.policy.hint()}"
                )
                await _refuse(scope, receive, send, 403, why)
                return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, why: str) -> None:
    if scope["type"] != "http":  # a websocket: close before accepting
        await send({"type": "websocket.close", "code": 1008})
        return
    await GWJSONResponse({"detail": why}, status_code=status)(scope, receive, send)
