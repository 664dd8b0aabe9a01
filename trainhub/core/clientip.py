"""The address of the client behind a request, for security decisions (the log-in rate limit)
and logs. ``REMOTE_ADDR`` is the peer of the TCP connection; when that peer is one of
``TRAINHUB_TRUSTED_PROXIES``, the client is read from ``X-Forwarded-For`` the safe way: from the
right, skipping trusted proxies, the first untrusted address. Each proxy appends the address it
saw, so everything left of that is whatever the client chose to send and is never believed."""
from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_trusted_proxies(raw: str, name: str = "TRAINHUB_TRUSTED_PROXIES") -> tuple[Network, ...]:
    """Comma-separated IP addresses and CIDR networks; empty means trust nobody. A bad entry
    stops startup with a message naming the variable and the entry."""
    networks = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name}={raw!r}: {entry!r} is not an IP address or CIDR network ({exc}); "
                f"use e.g. 127.0.0.1,10.0.0.0/8,::1") from None
    return tuple(networks)


def _ip(text: str) -> Address | None:
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    # A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d; compare and key it as IPv4.
    return ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip


def _trusted(ip: Address, proxies: Sequence[Network]) -> bool:
    return any(ip.version == net.version and ip in net for net in proxies)


def client_address(remote_addr: str, forwarded_for: str | None, proxies: Sequence[Network]) -> str:
    """The client's address, normalised (``2001:DB8::1`` and ``::ffff:10.0.0.1`` key as
    ``2001:db8::1`` and ``10.0.0.1``). ``remote_addr`` unchanged when it is not an IP address."""
    peer = _ip(remote_addr)
    if peer is None:
        return remote_addr
    if not forwarded_for or not _trusted(peer, proxies):
        return str(peer)
    hops = forwarded_for.split(",")
    leftmost = None
    for hop in reversed(hops):
        ip = _ip(hop)
        if ip is None:
            # Garbage where a trusted proxy should have written an address: believe nothing
            # further left, and fall back to the connection's own peer.
            return str(peer)
        if not _trusted(ip, proxies):
            return str(ip)
        leftmost = ip
    # Every hop is a trusted proxy: the request started on one of them.
    return str(leftmost)


def request_client_address(request) -> str:
    """:func:`client_address` of a Django request under ``settings.TRAINHUB_TRUSTED_PROXIES``."""
    from django.conf import settings

    return client_address(request.META.get("REMOTE_ADDR", ""), request.META.get("HTTP_X_FORWARDED_FOR"),
                          settings.TRAINHUB_TRUSTED_PROXIES)
