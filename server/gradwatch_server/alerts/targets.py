"""Webhook targets: which URLs the server may call, and calling exactly what was checked.

Only http(s). Unless private targets are allowed, the host is resolved once and every
address must be global: not loopback, private, link-local, reserved or shared, and not an
IPv6 form that embeds such an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-compatible ``::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``, Teredo, NAT64
``64:ff9b::a.b.c.d``). The request then connects to the checked address itself (the URL's
host still names the TLS certificate and the ``Host`` header), so a DNS answer that
changes between the check and the request (rebinding) cannot redirect it.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.parse
from dataclasses import dataclass
from typing import Any

NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefusedError(ValueError):
    """A webhook URL that may not be called; the message says why and how to allow it."""


@dataclass(frozen=True)
class Target:
    """A checked URL: connect to ``address`` (None: by name, private targets allowed)."""

    scheme: str
    host: str
    port: int
    path: str
    address: str | None


def embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (none for IPv4 or plain IPv6)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    found += list(address.teredo or ())
    if int(address) >> 32 == 0 or any(address in net for net in NAT64):
        found.append(low)  # IPv4-compatible ::a.b.c.d, or NAT64
    return found


def is_public(address: IPAddress) -> bool:
    """Global itself, and every IPv4 address it embeds global too; never ``::a.b.c.d``."""
    if isinstance(address, ipaddress.IPv6Address) and int(address) >> 32 == 0:
        return False  # IPv4-compatible: deprecated, and routed as IPv4 by some stacks
    return address.is_global and all(v4.is_global for v4 in embedded_ipv4(address))


def check_target(url: str, *, allow_private: bool) -> Target:
    """The checked target of ``url``, else ``TargetRefusedError``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefusedError(
            f"webhook URL {url[:100]!r} must be http:// or https:// with a host"
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise TargetRefusedError(f"webhook URL {url[:100]!r} has a bad port") from e
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    target = Target(parts.scheme, parts.hostname, port, path, None)
    if allow_private:
        return target
    try:
        infos = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except OSError as e:
        raise TargetRefusedError(f"webhook host {parts.hostname!r} does not resolve: {e}") from e
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if not is_public(address):
            raise TargetRefusedError(
                f"webhook host {parts.hostname!r} resolves to {address}, a loopback, private "
                "or link-local address; start the server with --allow-private-webhooks "
                "(GRADWATCH_ALLOW_PRIVATE_WEBHOOKS=1) to allow internal targets"
            )
    return Target(parts.scheme, parts.hostname, port, path, str(addresses[0]))


def connection(target: Target, timeout: float) -> http.client.HTTPConnection:
    """An HTTP(S) connection to ``target`` that connects to its checked address."""
    cls = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
    conn = cls(target.host, target.port, timeout=timeout)
    if target.address is not None:
        pinned = (target.address, target.port)

        def connect(_where: Any, *args: Any, **kw: Any) -> socket.socket:
            return socket.create_connection(pinned, *args, **kw)

        # http.client opens its socket through this attribute; TLS still checks target.host
        conn._create_connection = connect  # type: ignore[attr-defined]
    return conn
