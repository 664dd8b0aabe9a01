"""The web server's ASGI handler (trainhub/asgi.py): a request for a sync view makes one trip to a thread
for its middleware and view, not one per middleware hook; the live log's async views stay async."""
import asyncio

import httpx
import pytest
from asgiref.sync import SyncToAsync
from django.core.handlers.asgi import ASGIHandler

from trainhub.asgi import Handler


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
    assert ours <= 4, ours  # the chain and view, the request signals' receivers, the response's close


def test_the_live_log_stream_is_still_an_async_view(monkeypatch, transactional_db, settings):
    """Its view runs in the event loop (a thread of its own per open stream would not scale to many viewers)."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    app = Handler()
    sync_chain = []
    monkeypatch.setattr(app._sync, "get_response", lambda request: sync_chain.append(request.path))
    response, _ = hops(monkeypatch, app, "/jobs/1/logs/stream")
    assert response.status_code == 403 and "log in to follow this log" in response.text
    assert sync_chain == []
