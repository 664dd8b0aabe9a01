"""The log-in rate limit behind a reverse proxy: with TRAINHUB_TRUSTED_PROXIES the client is the
rightmost untrusted X-Forwarded-For address, so clients are limited separately and cannot escape
by sending their own header; without it X-Forwarded-For is ignored."""
from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.security.test_deployment import manage
from trainhub.core.clientip import client_address, parse_trusted_proxies

PROXY = "10.0.0.1"  # the nginx/Caddy in front of every request below


@pytest.fixture
def behind_proxy(settings):
    settings.TRAINHUB_TRUSTED_PROXIES = parse_trusted_proxies("10.0.0.0/24")
    return settings


def attempt(client, password, forwarded_for=None, username="alice"):
    headers = {"HTTP_X_FORWARDED_FOR": forwarded_for} if forwarded_for is not None else {}
    return client.post("/login", {"username": username, "password": password}, REMOTE_ADDR=PROXY, **headers)


def lock_out(client, forwarded_for=None):
    for _ in range(10):
        assert attempt(client, "wrong", forwarded_for).status_code == 200
    assert attempt(client, "wrong", forwarded_for).status_code == 429


# Through the real /login form

@pytest.mark.django_db
def test_behind_a_trusted_proxy_two_clients_are_limited_separately(client, user, behind_proxy):
    lock_out(client, "203.0.113.7")
    assert attempt(client, "correct-horse-battery", "203.0.113.7").status_code == 429
    assert attempt(client, "correct-horse-battery", "198.51.100.9").status_code == 302


@pytest.mark.django_db
def test_a_client_cannot_escape_by_sending_its_own_x_forwarded_for(client, user, behind_proxy):
    # The proxy appends the real address (nginx $proxy_add_x_forwarded_for); whatever the
    # client put to its left changes nothing.
    lock_out(client, "203.0.113.7")
    for spoofed in ("198.51.100.9", "1.2.3.4, 5.6.7.8", "not-an-address", "10.0.0.2"):
        response = attempt(client, "correct-horse-battery", f"{spoofed}, 203.0.113.7")
        assert response.status_code == 429, spoofed
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_proxy_hops_inside_the_trusted_network_are_skipped(client, user, behind_proxy):
    lock_out(client, "203.0.113.7, 10.0.0.5")  # client -> edge proxy 10.0.0.5 -> proxy 10.0.0.1
    assert attempt(client, "correct-horse-battery", "203.0.113.7").status_code == 429
    assert attempt(client, "correct-horse-battery", "198.51.100.9, 10.0.0.5").status_code == 302


@pytest.mark.django_db
def test_without_the_setting_x_forwarded_for_is_ignored(client, user, settings):
    assert settings.TRAINHUB_TRUSTED_PROXIES == ()
    lock_out(client, "203.0.113.7")
    # Every new X-Forwarded-For is still the same REMOTE_ADDR: still locked.
    for spoofed in ("198.51.100.9", "198.51.100.10, 198.51.100.11"):
        assert attempt(client, "correct-horse-battery", spoofed).status_code == 429
    assert attempt(client, "correct-horse-battery").status_code == 429


@pytest.mark.django_db
def test_a_header_from_an_untrusted_peer_is_ignored(client, user, behind_proxy):
    # A client that reaches the app directly (not through the proxy) cannot pick its address.
    for i in range(10):
        client.post("/login", {"username": "alice", "password": "wrong"}, REMOTE_ADDR="203.0.113.7",
                    HTTP_X_FORWARDED_FOR=f"198.51.100.{i}")
    response = client.post("/login", {"username": "alice", "password": "correct-horse-battery"},
                           REMOTE_ADDR="203.0.113.7", HTTP_X_FORWARDED_FOR="198.51.100.99")
    assert response.status_code == 429


@pytest.mark.django_db
def test_a_garbage_header_falls_back_to_the_proxy_address(client, user, behind_proxy):
    lock_out(client, "garbage")
    assert attempt(client, "correct-horse-battery", "").status_code == 429  # same key: REMOTE_ADDR
    assert attempt(client, "correct-horse-battery", "203.0.113.7").status_code == 302


# The setting

@pytest.mark.parametrize("raw, bad", [
    ("10.0.0.1,nginx", "nginx"),
    ("10.0.0.0/33", "10.0.0.0/33"),
    ("10.0.0.1/8", "10.0.0.1/8"),  # host bits set: 10.0.0.0/8 or 10.0.0.1? Say which.
    ("10.0.0.1 10.0.0.2", "10.0.0.1 10.0.0.2"),  # commas, not spaces
    ("::1, ::1::2", "::1::2"),
    ("*", "*"),
])
def test_a_bad_setting_raises_an_error_naming_the_variable_and_the_entry(raw, bad):
    with pytest.raises(ImproperlyConfigured, match="TRAINHUB_TRUSTED_PROXIES=") as info:
        parse_trusted_proxies(raw)
    assert f"{bad!r} is not an IP address or CIDR network" in str(info.value)


def test_a_bad_setting_stops_startup(tmp_path):
    result = manage(tmp_path, "check", TRAINHUB_TRUSTED_PROXIES="127.0.0.1,proxy.internal")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "TRAINHUB_TRUSTED_PROXIES='127.0.0.1,proxy.internal'" in result.stderr
    assert "'proxy.internal' is not an IP address" in result.stderr


def test_the_setting_accepts_addresses_networks_ipv6_and_blanks():
    assert parse_trusted_proxies("") == ()
    assert [str(n) for n in parse_trusted_proxies(" 127.0.0.1, 10.0.0.0/8,,::1 , fd00::/8 ")] == [
        "127.0.0.1/32", "10.0.0.0/8", "::1/128", "fd00::/8"]


# The address function

def nets(raw):
    return parse_trusted_proxies(raw)


@pytest.mark.parametrize("remote, forwarded, trusted, expected", [
    # nobody trusted: REMOTE_ADDR, whatever the header says
    ("10.0.0.1", "203.0.113.7", "", "10.0.0.1"),
    ("10.0.0.1", None, "10.0.0.1", "10.0.0.1"),
    ("10.0.0.1", "", "10.0.0.1", "10.0.0.1"),
    # a peer outside the trusted list: its header is ignored
    ("192.0.2.1", "203.0.113.7", "10.0.0.0/8", "192.0.2.1"),
    # CIDR
    ("10.1.2.3", "203.0.113.7", "10.0.0.0/8", "203.0.113.7"),
    ("10.1.2.3", " 203.0.113.7 ", "10.0.0.0/8", "203.0.113.7"),
    # rightmost untrusted wins; spoofed entries to its left are ignored
    ("10.0.0.1", "1.1.1.1, 203.0.113.7", "10.0.0.1", "203.0.113.7"),
    # several proxy hops, all trusted, are skipped
    ("10.0.0.1", "203.0.113.7, 172.16.0.5, 10.0.0.9", "10.0.0.0/8,172.16.0.0/12", "203.0.113.7"),
    # an untrusted hop in the chain stops the walk: it is the client as far as we can tell
    ("10.0.0.1", "203.0.113.7, 192.0.2.50, 10.0.0.9", "10.0.0.0/8", "192.0.2.50"),
    # every hop trusted: the request began on a trusted host, the leftmost one
    ("10.0.0.1", "10.0.0.3, 10.0.0.2", "10.0.0.0/8", "10.0.0.3"),
    # IPv6 proxy, IPv6 client, normalised
    ("::1", "2001:DB8:0:0::7", "::1", "2001:db8::7"),
    ("fd00::1", "203.0.113.7, fd00::2", "fd00::/8", "203.0.113.7"),
    ("10.0.0.1", "2001:db8::7", "10.0.0.1", "2001:db8::7"),
    # an IPv4 peer on a dual-stack socket
    ("::ffff:10.0.0.1", "203.0.113.7", "10.0.0.0/8", "203.0.113.7"),
    ("::ffff:192.0.2.1", "203.0.113.7", "10.0.0.0/8", "192.0.2.1"),
    # garbage where a trusted hop should be: the proxy's own address
    ("10.0.0.1", "garbage", "10.0.0.1", "10.0.0.1"),
    ("10.0.0.1", "203.0.113.7:4711", "10.0.0.1", "10.0.0.1"),
    ("10.0.0.1", "203.0.113.7, unknown", "10.0.0.1", "10.0.0.1"),
    ("10.0.0.1", "203.0.113.7,,", "10.0.0.1", "10.0.0.1"),
    ("10.0.0.1", "\x00\xff;<script>", "10.0.0.1", "10.0.0.1"),
    # garbage left of the real client is the client's own doing and never read
    ("10.0.0.1", "garbage, 203.0.113.7", "10.0.0.1", "203.0.113.7"),
    # REMOTE_ADDR that is no IP (a unix socket, a test harness): unchanged, header ignored
    ("", "203.0.113.7", "10.0.0.1", ""),
    ("testserver", "203.0.113.7", "10.0.0.1", "testserver"),
])
def test_client_address(remote, forwarded, trusted, expected):
    assert client_address(remote, forwarded, nets(trusted)) == expected


def test_a_long_spoofed_header_is_not_walked_past_the_client():
    forwarded = ", ".join(f"198.51.{i // 256}.{i % 256}" for i in range(5000)) + ", 203.0.113.7"
    assert client_address("10.0.0.1", forwarded, nets("10.0.0.1")) == "203.0.113.7"
