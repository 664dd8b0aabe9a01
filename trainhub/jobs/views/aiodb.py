"""Database calls of the async views (the live log stream, its page sections, the log download
under ASGI): ``await aiodb.call(fn, *args)``.

They run in the event loop's shared worker threads (``thread_sensitive=False``), and each of those
threads keeps its connection from one call to the next. Django's thread-sensitive calls would run
in a new thread per request instead, which opens a new connection per request: with SQLite that was
half the CPU of opening a live log (bench/sse_connect.py).

No request signal reaches these threads, so nothing else would ever close their connections: after
a call that failed with a database error (the database restarted, the network to it was cut) this
closes the thread's connections that are unusable, as ``close_old_connections`` does at a request's
start, and the next call in that thread connects afresh. The caller decides what a failed call
means for its client (the stream waits and tries again: ``stream.py``).

With a connection pool (PostgreSQL under the web server: ``TRAINHUB_DB_POOL_SIZE``) each call hands its
connection back to the pool when it returns, which costs far less than a connection: a thread that kept
it would take one of the pool's connections from every other request for good.
"""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection


async def call(fn, /, *args, **kwargs):
    return await sync_to_async(_run, thread_sensitive=False)(fn, args, kwargs)


def _run(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    except DatabaseError:
        close_old_connections()  # after an error: the unusable ones (CONN_MAX_AGE 0: all of this thread's)
        raise
    finally:
        if _pooled():
            connection.close()  # back to the pool: a thread that keeps one would hold it for good


def _pooled() -> bool:
    return bool(settings.DATABASES["default"].get("OPTIONS", {}).get("pool"))
