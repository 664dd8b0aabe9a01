"""Webhooks reach public addresses only: loopback, private, link-local and metadata addresses are
refused at delivery time, on the address the name resolves to, unless an administrator allows
the network; and the owner never sees what an internal service answered."""
import ipaddress
import socket
import ssl
import subprocess

import pytest

from tests.notify.conftest import BANNER
from trainhub.notify import services
from trainhub.notify.address import why_refused
from trainhub.notify.models import NotificationDelivery
from trainhub.runs.lifecycle import Outcome, job_finish


def _finish_with_hook(running_job, url):
    job = running_job(spec={"notify": {"webhook": url, "on": ["succeeded"]}})
    assert job_finish(job, Outcome("succeeded", 0, "exit 0"))
    assert services.wait_idle(30)
    return NotificationDelivery.objects.get(job=job)


@pytest.mark.parametrize("where", ["127.0.0.1:{port}", "localhost:{port}", "[::ffff:127.0.0.1]:{port}",
                                   "2130706433:{port}", "169.254.169.254", "10.20.30.40:8080", "[fd00:ec2::254]"])
def test_a_hook_to_an_internal_address_is_refused_with_a_clear_status_and_never_sent(running_job, receiver, where):
    hook = receiver()  # a live service on 127.0.0.1: nothing may reach it
    url = f"http://{where.format(port=hook.server.server_address[1])}/hook"
    delivery = _finish_with_hook(running_job, url)

    assert (delivery.status, delivery.attempts) == ("refused", 1)  # not retried: retrying cannot help
    assert delivery.result.startswith("refused: the webhook's address is not public")
    assert "TRAINHUB_WEBHOOK_ALLOWED_NETWORKS" in delivery.last_error  # the admin is told how to allow it
    assert hook.requests == []


def test_an_allowed_network_lets_an_internal_hook_through(running_job, receiver, settings):
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.1/32",)
    hook = receiver()
    delivery = _finish_with_hook(running_job, hook.url.replace("127.0.0.1", "localhost"))  # a name, resolved
    assert (delivery.status, delivery.result, delivery.http_status) == ("sent", "delivered (HTTP 200)", 200)
    assert len(hook.requests) == 1


def test_allowing_one_network_does_not_open_the_others(running_job, receiver, settings):
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("10.0.0.0/8",)
    hook = receiver()
    assert _finish_with_hook(running_job, hook.url).status == "refused"
    assert hook.requests == []


def test_the_connection_goes_to_the_address_that_was_checked_not_to_a_second_lookup(
        running_job, receiver, settings, monkeypatch):
    """DNS rebinding: the name first answers with an allowed address, then with the one the
    attacker wants. Name resolution is faked here (no DNS server of our own can run in a test);
    the connections are real."""
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.2/32",)  # nothing listens there
    settings.TRAINHUB_NOTIFY_TRIES = 1
    hook = receiver()  # listens on 127.0.0.1 only
    real, asked = socket.getaddrinfo, []

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        return real("127.0.0.2" if len(asked) == 1 else "127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    delivery = _finish_with_hook(running_job, f"http://rebind.test:{hook.server.server_address[1]}/hook")

    assert asked == ["rebind.test"]  # resolved once, and that answer was used
    assert hook.requests == []
    assert (delivery.status, delivery.result) == ("failed", "failed (no HTTP answer)")


def test_the_owner_sees_the_http_status_but_never_the_answer_or_the_network_error(running_job, receiver, settings,
                                                                                 client):
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)
    settings.TRAINHUB_NOTIFY_TRIES = 1
    answering = receiver([500])  # answers with a banner as its reason phrase and body
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    first = _finish_with_hook(running_job, answering.url)
    second = _finish_with_hook(running_job, closed_port)
    assert (first.result, second.result) == ("failed (HTTP 500)", "failed (no HTTP answer)")
    assert "refused" in second.last_error.lower()  # the administrator keeps the particulars

    client.force_login(running_job.owner)
    page = client.get("/notifications/").content.decode()
    assert "failed (HTTP 500)" in page and "failed (no HTTP answer)" in page
    for leak in (BANNER, "OpenSSH", "Connection refused", "Errno", "ConnectionRefusedError"):
        assert leak not in page, leak


def _certificates(tmp_path):
    """A test CA and a certificate from it for the name ``localhost`` only (openssl's command line)."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=TrainHub test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "host.key", "-out", "host.csr", "-subj", "/CN=localhost")
    (tmp_path / "san.ext").write_text("subjectAltName=DNS:localhost\n")
    openssl("x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "host.pem", "-days", "1", "-extfile", "san.ext")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "host.pem", tmp_path / "host.key")
    return server, tmp_path / "ca.pem"


def test_https_connects_to_the_checked_address_and_verifies_the_urls_host_name(running_job, receiver, settings,
                                                                                 tmp_path, monkeypatch):
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)
    settings.TRAINHUB_NOTIFY_TRIES = 1
    server_tls, ca = _certificates(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the client trusts the test CA (as it would a public one)
    hook = receiver(tls=server_tls)
    by_name = _finish_with_hook(running_job, hook.url.replace("127.0.0.1", "localhost"))
    # connected to 127.0.0.1, verified the certificate for "localhost"
    assert (by_name.status, by_name.result) == ("sent", "delivered (HTTP 200)")
    by_address = _finish_with_hook(running_job, hook.url)  # the certificate does not name 127.0.0.1
    assert (by_address.status, by_address.result) == ("failed", "failed (no HTTP answer)")
    assert "certificate" in by_address.last_error.lower()
    assert len(hook.requests) == 1


@pytest.mark.parametrize("text,refused", [
    ("127.0.0.1", True), ("::1", True), ("10.0.0.1", True), ("172.16.5.4", True), ("192.168.1.1", True),
    ("169.254.169.254", True), ("fe80::1", True), ("fd00:ec2::254", True), ("100.100.100.200", True),
    ("0.0.0.0", True), ("224.0.0.1", True), ("::ffff:169.254.169.254", True), ("64:ff9b::a9fe:a9fe", True),
    ("2002:7f00:1::1", True), ("93.184.216.34", False), ("8.8.8.8", False), ("2606:2800:220:1::1", False),
])
def test_which_addresses_a_webhook_may_reach(text, refused, settings):
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ()
    assert bool(why_refused(ipaddress.ip_address(text))) is refused


def test_a_malformed_allow_list_stops_startup_naming_the_variable():
    from django.core.exceptions import ImproperlyConfigured

    from trainhub.core.clientip import parse_trusted_proxies

    with pytest.raises(ImproperlyConfigured, match="TRAINHUB_WEBHOOK_ALLOWED_NETWORKS=.*'10.0.0.0/33'"):
        parse_trusted_proxies("127.0.0.1,10.0.0.0/33", "TRAINHUB_WEBHOOK_ALLOWED_NETWORKS")
