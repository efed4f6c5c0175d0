"""Webhook targets (issue 19 item 12): IPv4-embedding IPv6 forms are refused, and a send
connects to the address that was checked, never to a second DNS answer."""

from __future__ import annotations

import pytest

from gradwatch_server.alerts.targets import Target, TargetRefusedError, check_target
from gradwatch_server.alerts.webhooks import WebhookPolicy, post
from tests.server.receiver import receiver


@pytest.mark.parametrize(
    "url",
    [
        "http://[::127.0.0.1]/hook",  # IPv4-compatible loopback
        "http://[::8.8.8.8]/hook",  # IPv4-compatible at all
        "http://[2002:7f00:1::]/hook",  # 6to4 of 127.0.0.1
        "http://[2002:a9fe:a9fe::]/hook",  # 6to4 of 169.254.169.254
        "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
        "http://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
        "http://[::ffff:10.0.0.1]/hook",  # IPv4-mapped
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",  # Teredo, client 127.0.0.1
    ],
)
def test_ipv6_forms_of_internal_ipv4_addresses_are_refused(url: str) -> None:
    with pytest.raises(TargetRefusedError, match="--allow-private-webhooks"):
        check_target(url, allow_private=False)


def test_public_addresses_are_checked_once_and_pinned() -> None:
    target = check_target("https://93.184.216.34:8443/x?y=1", allow_private=False)
    assert target == Target("https", "93.184.216.34", 8443, "/x?y=1", "93.184.216.34")
    nat64 = check_target("http://[64:ff9b::808:808]/", allow_private=False)  # 8.8.8.8
    assert nat64.address == "64:ff9b::808:808"


def test_a_send_connects_to_the_checked_address_not_a_new_lookup() -> None:
    """The URL's host does not resolve at all (.invalid): the request still reaches the
    checked address, carrying the URL's host name."""
    with receiver() as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        target = Target("http", "hook.invalid", port, "/pinned", "127.0.0.1")
        assert post(target, b"{}", {"Content-Type": "application/json"}, WebhookPolicy()) == 200
    (got,) = hook.to("/pinned")
    assert got.headers["Host"] == f"hook.invalid:{port}"
