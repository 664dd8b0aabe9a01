"""Log-in is rate-limited per username and address: the 11th try within the window is a 429."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def attempt(client, password, username="alice", address="10.0.0.1"):
    return client.post("/login", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_ten_failed_log_ins_lock_the_username_for_that_address(client, user):
    for _ in range(10):
        assert attempt(client, "wrong").status_code == 200
    response = attempt(client, "wrong")
    assert response.status_code == 429
    assert "Too many failed log-ins" in response.content.decode()
    assert 0 < int(response["Retry-After"]) <= 300


def test_a_locked_username_is_refused_even_with_the_right_password(client, user):
    for _ in range(10):
        attempt(client, "wrong")
    assert attempt(client, "correct-horse-battery").status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_lock_is_per_username_and_address(client, user, django_user_model):
    django_user_model.objects.create_user("bob", password="bob-password-1")
    for _ in range(10):
        attempt(client, "wrong")
    assert attempt(client, "wrong", address="10.0.0.2").status_code == 200
    assert attempt(client, "bob-password-1", username="bob").status_code == 302


def test_the_lock_ends_when_the_window_has_passed(client, user, monkeypatch):
    import time

    for _ in range(10):
        attempt(client, "wrong")
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 301)
    assert attempt(client, "correct-horse-battery").status_code == 302


def test_a_successful_log_in_clears_the_count(client, user):
    for _ in range(9):
        attempt(client, "wrong")
    assert attempt(client, "correct-horse-battery").status_code == 302
    client.logout()
    for _ in range(9):
        assert attempt(client, "wrong").status_code == 200


def test_the_admin_log_in_form_shares_the_limit(client, user):
    for _ in range(10):
        attempt(client, "wrong")
    response = client.post("/admin/login/", {"username": "alice", "password": "wrong"}, REMOTE_ADDR="10.0.0.1")
    assert response.status_code == 429
    assert "Too many failed log-ins" in response.content.decode()


def test_the_admin_log_in_page_still_tells_a_non_staff_user_why(user_client):
    response = user_client.get("/admin/login/?next=/admin/")
    assert response.status_code == 200 and "not authorized" in response.content.decode()


def test_the_cache_table_exists_in_a_migrated_database():
    from django.db import connection

    assert "trainhub_cache" in connection.introspection.table_names()


def test_staff_log_in_through_the_admin_form_and_land_in_the_admin(client, django_user_model):
    django_user_model.objects.create_user("root", password="staff-secret-pw", is_staff=True)
    response = client.post("/admin/login/?next=/admin/", {"username": "root", "password": "staff-secret-pw",
                                                          "next": "/admin/"})
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200


def test_an_ipv6_client_cannot_escape_the_lock_by_hopping_addresses_in_its_64(client, user):
    for host in range(10):  # one guesser, ten addresses of its own /64
        assert attempt(client, "wrong", address=f"2001:db8:0:7::{host + 1:x}").status_code == 200
    assert attempt(client, "wrong", address="2001:db8:0:7:ffff::99").status_code == 429
    assert attempt(client, "wrong", address="2001:db8:0:8::1").status_code == 200  # another /64 is not locked


def test_a_guesser_spread_over_many_addresses_locks_the_account_for_everyone(client, user, settings):
    settings.TRAINHUB_LOGIN_MAX_ACCOUNT_FAILURES = 12
    for n in range(12):  # each address stays under its own limit of 10
        assert attempt(client, "wrong", address=f"10.1.{n // 5}.{n % 5 + 1}").status_code == 200
    response = attempt(client, "correct-horse-battery", address="192.0.2.200")
    assert response.status_code == 429 and "_auth_user_id" not in client.session
    assert "Too many failed log-ins for this username" in response.content.decode()
