"""The notifications page: linked from the header, saves settings, refuses non-http(s) webhooks."""
from trainhub.notify.models import NotifySettings


def test_the_header_links_to_the_notifications_page(user_client):
    page = user_client.get("/notifications/")
    assert page.status_code == 200
    assert b'href="/notifications/"' in user_client.get("/").content


def test_settings_are_saved_with_the_address(user_client, user):
    response = user_client.post("/notifications/", {"address": "alice@example.test", "email": "on",
                                                    "webhook_url": "https://hooks.example.test/th",
                                                    "events": ["failed", "cancelled"]})
    assert response.status_code == 302
    mine = NotifySettings.objects.get(user=user)
    assert (mine.webhook_url, mine.email, mine.events) == ("https://hooks.example.test/th", True, ["failed", "cancelled"])
    user.refresh_from_db()
    assert user.email == "alice@example.test"
    assert b"hooks.example.test" in user_client.get("/notifications/").content


def test_a_webhook_that_is_not_http_is_refused_with_a_field_message(user_client, user):
    for url in ("file:///etc/passwd", "ftp://example.test/x", "gopher://x", "http://"):
        response = user_client.post("/notifications/", {"webhook_url": url, "events": ["failed"]})
        assert response.status_code == 422, url
        assert b"must be an http:// or https:// URL" in response.content
    assert not NotifySettings.objects.filter(user=user).exists()


def test_email_without_an_address_is_refused(user_client):
    response = user_client.post("/notifications/", {"email": "on", "events": ["failed"]})
    assert response.status_code == 422 and b"Add an e-mail address" in response.content


def test_the_page_needs_a_login(client):
    assert client.get("/notifications/").status_code == 302


def test_a_webhook_at_an_internal_ip_address_is_refused_on_the_field(user_client, user, settings):
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ()
    for url in ("http://169.254.169.254/latest", "http://10.0.0.5:8080/hook", "http://[::1]/hook"):
        response = user_client.post("/notifications/", {"webhook_url": url, "events": ["failed"]})
        assert response.status_code == 422, url
        assert b"webhooks go to public addresses only" in response.content
    assert not NotifySettings.objects.filter(user=user).exists()
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("10.0.0.0/8",)  # an internal network the admin allowed
    assert user_client.post("/notifications/", {"webhook_url": "http://10.0.0.5:8080/hook",
                                                "events": ["failed"]}).status_code == 302
