"""Where a webhook may go: public addresses only, unless an administrator allows a network.

A webhook URL is chosen by any user, and the delivering process (a worker, the web server) sits
inside the lab's network, so without a check any user could make it POST to the database host,
a cloud metadata service (169.254.169.254) or a service on localhost — and read the answers on
the notifications page. The check runs at delivery time on the *resolved* addresses, and the
connection then goes to the address that was checked (``connect_to``), never to a second
resolution of the name, so a name that changes its answer (DNS rebinding) gets nowhere new.
"""
from __future__ import annotations

import ipaddress
import socket

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(Exception):
    """The webhook resolves to an address that is not allowed; ``str()`` is for administrators."""


def allowed_networks() -> tuple:
    """``TRAINHUB_WEBHOOK_ALLOWED_NETWORKS`` (settings.py parses and checks it at startup)."""
    return tuple(ipaddress.ip_network(n) if isinstance(n, str) else n
                 for n in getattr(settings, "TRAINHUB_WEBHOOK_ALLOWED_NETWORKS", ()))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo, NAT64): checked as well, so
    ``::ffff:127.0.0.1`` or ``64:ff9b::a9fe:a9fe`` cannot stand in for a refused IPv4 address."""
    if ip.ipv4_mapped:
        return ip.ipv4_mapped
    if ip.sixtofour:
        return ip.sixtofour
    if ip.teredo:
        return ip.teredo[1]
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def why_refused(ip: Address) -> str | None:
    """None when a webhook may connect to ``ip``; else what kind of address it is."""
    if any(ip.version == net.version and ip in net for net in allowed_networks()):
        return None
    inner = _embedded_ipv4(ip) if ip.version == 6 else None
    if inner is not None:  # the address it stands for decides, allow-list included
        return why_refused(inner)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (cloud metadata lives here)"
    if ip.is_unspecified or ip.is_multicast:
        return "not a unicast address"
    if ip.is_private or not ip.is_global:
        return "private or reserved"
    return None


def resolve(host: str, port: int) -> list[str]:
    """The addresses to connect to, each checked; raises ``Refused`` if any is not allowed (a name
    that answers with one public and one private address is refused as a whole)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectionError(f"cannot resolve {host}: {exc}") from None
    addresses: list[str] = []
    for *_, sockaddr in infos:
        text = sockaddr[0].split("%", 1)[0]
        if text not in addresses:
            addresses.append(text)
    for text in addresses:
        reason = why_refused(ipaddress.ip_address(text))
        if reason:
            raise Refused(f"{host} resolves to {text}, a {reason} address; allow its network in "
                          f"TRAINHUB_WEBHOOK_ALLOWED_NETWORKS if this hook is meant to be internal")
    return addresses


def connect_to(addresses: list[str]):
    """A ``create_connection`` for ``http.client`` that connects only to the checked addresses
    (TLS still verifies the certificate against the URL's host name)."""
    def create_connection(address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):
        error: OSError | None = None
        for ip in addresses:
            try:
                return socket.create_connection((ip, address[1]), timeout, source_address)
            except OSError as exc:
                error = exc
        raise error or OSError("no address to connect to")
    return create_connection
