"""The web server's ASGI handler (trainhub/asgi.py): a request for a sync view makes one trip to a thread
for its middleware and view, not one per middleware hook; the live log's async views stay async."""
import asyncio

import httpx
import pytest
from asgiref.sync import SyncToAsync
from django.core.handlers.asgi import ASGIHandler

from trainhub.asgi import Handler, take_request_started


@pytest.fixture(autouse=True)
def _as_in_the_web_server():
    """``request_started`` as the web server has it (Django's test client puts a receiver back after each of
    its requests, so another test in this process may have); Django's own receivers again afterwards."""
    from django.core.signals import request_started
    from django.db import close_old_connections, reset_queries

    take_request_started()
    yield
    request_started.connect(reset_queries)
    request_started.connect(close_old_connections)


def hops(monkeypatch, app, path: str, **headers) -> tuple[httpx.Response, int]:
    """The response to GET ``path`` through ``app`` in this process, and how many times the request
    went from the event loop to a thread and back (asgiref ``sync_to_async`` calls)."""
    count = 0
    original = SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        nonlocal count
        count += 1
        return await original(self, *args, **kwargs)

    async def get():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            await client.get(path, headers=headers)  # warm: the first request also loads the URLconf
            nonlocal count
            count = 0
            return await client.get(path, headers=headers)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    response = asyncio.run(get())
    return response, count


@pytest.mark.parametrize("path", ["/login", "/api/jobs"])
def test_a_request_for_a_sync_view_goes_to_a_thread_once_for_all_its_middleware(
        path, monkeypatch, transactional_db, settings):
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    response, ours = hops(monkeypatch, Handler(), path)
    assert response.status_code in (200, 401), response.text
    _, djangos = hops(monkeypatch, ASGIHandler(), path)
    # Django's own handler: one trip per sync middleware hook, the view and the request signals
    print(f"{path}: {ours} trips to a thread, {djangos} with Django's handler")
    assert djangos >= ours + 6, (ours, djangos)
    assert ours <= 2, ours  # the chain and view, and the response's close (request_finished)


def test_the_live_log_stream_is_still_an_async_view(monkeypatch, transactional_db, settings):
    """Its view runs in the event loop (a thread of its own per open stream would not scale to many viewers)."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    app = Handler()
    sync_chain = []
    monkeypatch.setattr(app._sync, "get_response", lambda request: sync_chain.append(request.path))
    response, _ = hops(monkeypatch, app, "/jobs/1/logs/stream")
    assert response.status_code == 403 and "log in to follow this log" in response.text
    assert sync_chain == []


def test_sync_views_run_in_threads_that_live_on_and_keep_their_database_connection(
        monkeypatch, transactional_db, settings):
    """Django's thread-sensitive calls under ASGI run each request in a new thread, which opens a new database
    connection (SQLite: ~0.7 ms of every request). The handler's view threads live on, so with CONN_MAX_AGE (the
    web server's on SQLite) one connection serves request after request."""
    import threading

    from django.db import connection

    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    settings.TRAINHUB_WEB_THREADS = 2
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    app = Handler()
    seen = []
    respond = app._sync.get_response

    def spy(request):
        response = respond(request)
        seen.append((threading.current_thread().name, id(connection.connection)))
        return response

    monkeypatch.setattr(app._sync, "get_response", spy)

    async def requests():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            for _ in range(10):  # the token check reads the database
                assert (await client.get("/api/jobs", headers={"Authorization": "Bearer th_nope"})).status_code == 401

    try:
        asyncio.run(requests())
    finally:
        both = threading.Barrier(2)  # one call in each of the two view threads: each closes its connection

        def close():
            both.wait(timeout=10)
            connection.close()

        for done in [app._threads.submit(close) for _ in range(2)]:
            done.result()
        app._threads.shutdown()
    assert len(seen) == 10 and all(name.startswith("view") and conn != id(None) for name, conn in seen)
    threads = {name: {conn for n, conn in seen if n == name} for name, _ in seen}
    assert len(threads) <= 2 and all(len(conns) == 1 for conns in threads.values()), seen  # a connection a thread
