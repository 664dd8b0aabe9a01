"""API tokens may expire: a token made with "expires in N days" works until then and is refused
(401) after, shown as expired on the page; the page suggests the hidden prompt or a token file,
never the token on a command line."""
from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone


def create(client, **fields):
    response = client.post("/tokens/", {"name": "laptop", **fields})
    match = re.search(r'id="new-token-value">(th_[^<]+)<', response.content.decode())
    return response, match.group(1) if match else None


def test_a_token_with_an_expiry_works_until_then_and_is_refused_after(user_client, cpu_pool):
    from trainhub.api.models import ApiToken

    response, raw = create(user_client, expires_days="7")
    assert response.status_code == 201
    token = ApiToken.objects.get(name="laptop")
    assert timedelta(days=6, hours=23) < token.expires_at - timezone.now() <= timedelta(days=7)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    user_client.logout()
    assert user_client.get("/api/jobs", **auth).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert user_client.get("/api/jobs", **auth).status_code == 401


def test_a_token_without_an_expiry_lasts_and_the_page_shows_both(user_client, user):
    from trainhub.api.models import ApiToken

    _, raw = create(user_client)
    assert ApiToken.objects.get(name="laptop").expires_at is None
    ApiToken.issue(user, "old", expires_at=timezone.now() - timedelta(days=1))
    page = user_client.get("/tokens/").content.decode()
    assert "never" in page and "expired " in page


def test_a_bad_expiry_is_refused_naming_the_field(user_client):
    from trainhub.api.models import ApiToken

    for bad in ("0", "-3", "soon", "99999"):
        response, raw = create(user_client, expires_days=bad)
        assert response.status_code == 422 and raw is None
        assert "Expires in: a whole number of days" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_the_new_token_box_suggests_a_prompt_or_a_file_not_the_token_on_a_command_line(user_client):
    response, raw = create(user_client)
    page = response.content.decode()
    assert "--token-file" in page and f"--token {raw}" not in page
    assert page.count(raw) == 1  # shown once, in its own box
