"""The web server and its PostgreSQL connections, through a TCP proxy that counts and cuts them.

Under uvicorn the web server takes its connections from a pool (``TRAINHUB_DB_POOL_SIZE``, set by
``trainhub/asgi.py``) instead of opening one per request. While the database is cut off a page or an
API call answers 503 with a Retry-After, and the pages work again within seconds of its return.
"""
import time

import httpx
import pytest
from django.db import connection

from tests.asgi_server import serving, session_cookie
from tests.faults.helpers import through
from trainhub.api.models import ApiToken
from trainhub.jobs.models import Job

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="counts and cuts TCP connections to PostgreSQL (set DATABASE_URL=postgres://...)")

REQUESTS = 40


def pages(web, cookies, token, n):
    """``n`` requests, pages and API calls in turn; returns their status codes."""
    codes = []
    with httpx.Client(base_url=web.url, timeout=30, cookies=cookies) as client:
        for i in range(n):
            if i % 2:
                r = client.get("/api/jobs", headers={"Authorization": f"Bearer {token}"})
            else:
                r = client.get("/")
            codes.append(r.status_code)
    return codes


@pytest.mark.parametrize("pool_size, most", [("20", 4), ("0", REQUESTS)], ids=["pooled", "unpooled"])
def test_the_web_server_serves_its_requests_over_a_few_pooled_database_connections(
        pool_size, most, proxy, live_settings, transactional_db, user, user_client, cpu_pool, tmp_path):
    Job.objects.create(owner=user, name="listed", mode="centralized", spec={}, pool=cpu_pool)
    token = ApiToken.issue(user, "test")[1]
    with serving(live_settings, tmp_path / "uvicorn.log", DATABASE_URL=through(proxy),
                 TRAINHUB_DB_POOL_SIZE=pool_size) as web:
        before = proxy.forwarded
        codes = pages(web, session_cookie(user_client), token, REQUESTS)
        opened = proxy.forwarded - before
    assert codes == [200] * REQUESTS, codes
    if pool_size == "0":  # the contrast that shows what the pool saves: a connection per request
        assert opened >= REQUESTS, opened
    else:
        assert opened <= most, f"{opened} database connections for {REQUESTS} requests"


@pytest.mark.slow
def test_pages_answer_503_while_the_database_is_cut_and_work_again_seconds_after_it_returns(
        proxy, live_settings, transactional_db, user, user_client, cpu_pool, tmp_path):
    """The cut lasts longer than the pool's reconnect attempts (5 s), so the pool has given up on them once
    and must start new ones when the database is back; each request waits at most the pool's timeout (2 s)."""
    Job.objects.create(owner=user, name="listed", mode="centralized", spec={}, pool=cpu_pool)
    token = ApiToken.issue(user, "test")[1]
    cookies = session_cookie(user_client)
    with (serving(live_settings, tmp_path / "uvicorn.log", DATABASE_URL=through(proxy), TRAINHUB_DB_POOL_TIMEOUT="2")
          as web, httpx.Client(base_url=web.url, timeout=30, cookies=cookies) as client):
        assert pages(web, cookies, token, 4) == [200] * 4
        proxy.down()
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            started = time.monotonic()
            page = client.get("/")
            took = time.monotonic() - started
            assert page.status_code == 503, page.text
            assert "database is unreachable" in page.text and page.headers["Retry-After"]
            assert took < 6, f"a request waited {took:.1f} s while the database was cut"
            time.sleep(0.5)
        api = client.get("/api/jobs", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 503 and api.json()["detail"].startswith("the database is unreachable"), api.text
        proxy.up()
        back = time.monotonic()
        while (page := client.get("/")).status_code != 200:
            assert page.status_code == 503, page.text
            assert time.monotonic() - back < 10, "the pages did not come back within 10 s of the database"
            time.sleep(0.2)
        recovered = time.monotonic() - back
        assert "listed" in page.text
        started = time.monotonic()
        assert pages(web, cookies, token, 6) == [200] * 6
        assert time.monotonic() - started < 3, "requests after the recovery are still slow"
        assert "Traceback" not in web.output(), web.output()[-3000:]
    print(f"pages back {recovered:.1f} s after the database")
