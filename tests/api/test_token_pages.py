"""API tokens in the UI: create (shown once), list, revoke; a revoked token gets 401."""
import pytest

from trainhub.api.models import ApiToken

pytestmark = pytest.mark.django_db


def test_the_page_needs_a_login(client):
    assert client.get("/tokens/").status_code == 302


def test_a_created_token_is_shown_once_and_works(user_client, user):
    response = user_client.post("/tokens/", {"name": "laptop"})
    assert response.status_code == 201
    raw = response.context["new_token"]
    assert raw.encode() in response.content and b"trainhub login" in response.content
    assert raw.encode() not in user_client.get("/tokens/").content  # never again
    assert b"laptop" in user_client.get("/tokens/").content
    assert user_client.get("/api/jobs", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_a_token_needs_a_name(user_client):
    response = user_client.post("/tokens/", {"name": " "})
    assert response.status_code == 422 and ApiToken.objects.count() == 0


def test_a_revoked_token_gets_401(user_client, user, client):
    token, raw = ApiToken.issue(user, "ci")
    assert user_client.post(f"/tokens/{token.pk}/revoke").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    client.logout()
    assert client.get("/api/jobs", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_another_users_token_cannot_be_revoked_or_seen(user_client, django_user_model):
    bob = django_user_model.objects.create_user("bob")
    token, _ = ApiToken.issue(bob, "bobs-secret-name")
    assert user_client.post(f"/tokens/{token.pk}/revoke").status_code == 404
    assert b"bobs-secret-name" not in user_client.get("/tokens/").content
    token.refresh_from_db()
    assert token.revoked_at is None


def test_revoke_refuses_get(user_client, user):
    token, _ = ApiToken.issue(user)
    assert user_client.get(f"/tokens/{token.pk}/revoke").status_code == 405


def test_a_tokens_last_use_is_kept_to_the_minute_without_a_write_per_request(user_client, user, client):
    from datetime import timedelta

    from django.utils import timezone

    from trainhub.api.models import LAST_USED_EVERY

    token, raw = ApiToken.issue(user, "ci")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.get("/api/jobs", **auth).status_code == 200
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=10)
    assert client.get("/api/jobs", **auth).status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first  # within the minute: not written again
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - LAST_USED_EVERY)
    assert client.get("/api/jobs", **auth).status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first  # older than that: written
    assert "ci" in user_client.get("/tokens/").content.decode()
