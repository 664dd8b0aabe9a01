"""The server's CPU for opening one live log stream: VIEWERS clients open /jobs/ID/logs/stream of a
running job that prints nothing yet, and the uvicorn process's CPU seconds from the first request until
it is idle again (every stream set up: session, user, job, catch-up and first database read, the hub),
divided by VIEWERS (refused streams, counted by status, are in it too). That is what a page reload storm, or every viewer reconnecting after a server
restart, costs the one web process (bench/log_fanout.py measures the lines' fan-out itself).

    .venv/bin/python bench/sse_connect.py [--viewers 300] [--repeats 5]

Each repeat opens VIEWERS new streams on the same server and job, then closes them. Clients: asyncio +
httpx in this process; their CPU is not counted. SQLite, or PostgreSQL with DATABASE_URL (bench/log_common.py).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import time

import httpx
import psutil

import record
from log_common import Stack


async def hold(client: httpx.AsyncClient, url: str, opened: list, refused: list, release: asyncio.Event) -> None:
    async with client.stream("GET", url) as response:
        if response.status_code != 200:  # counted: the server refused this viewer
            refused.append(response.status_code)
            return
        async for _chunk in response.aiter_raw():  # the first chunk: the stream is open
            opened.append(time.monotonic())
            break
        await release.wait()


def idle(web: psutil.Process, quiet: float = 0.05, span: float = 1.0, limit: float = 120) -> float:
    """Wait until the process used under ``quiet`` of a core over ``span`` seconds; returns its CPU
    seconds at the start of that quiet span."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = sum(web.cpu_times()[:2])
        time.sleep(span)
        if sum(web.cpu_times()[:2]) - before < quiet * span:
            return before
    raise RuntimeError("the web server did not go idle")


async def repeat(url: str, cookies: dict, viewers: int, web: psutil.Process) -> dict:
    limits = httpx.Limits(max_connections=viewers + 10, max_keepalive_connections=viewers + 10)
    release, opened, refused = asyncio.Event(), [], []
    async with httpx.AsyncClient(cookies=cookies, limits=limits, timeout=httpx.Timeout(600, connect=60)) as client:
        cpu0, t0 = sum(web.cpu_times()[:2]), time.monotonic()
        tasks = [asyncio.create_task(hold(client, url, opened, refused, release)) for _ in range(viewers)]
        while len(opened) + len(refused) < viewers:
            if any(t.done() for t in tasks):
                await next(t for t in tasks if t.done())  # a stream that failed: raise its error
            await asyncio.sleep(0.05)
        all_open = time.monotonic() - t0
        cpu = await asyncio.to_thread(idle, web) - cpu0
        release.set()
        await asyncio.gather(*tasks)
    await asyncio.to_thread(idle, web)  # the closed streams are gone before the next repeat
    return {"open_all_s": round(all_open, 2), "cpu_s": round(cpu, 3), "cpu_ms_per_stream": round(cpu / viewers * 1000, 2),
            "opened": len(opened), "refused": dict(collections.Counter(refused))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with Stack() as stack:
        database = stack.database
        cookies = stack.cookies()
        job = stack.submit("10", "10", "3600", name="connect")  # waits an hour before its first line
        from trainhub.jobs.models import Job

        deadline = time.monotonic() + 120
        while Job.objects.get(pk=job.pk).status != "running":
            if time.monotonic() > deadline:
                raise RuntimeError("the job did not start")
            time.sleep(0.2)
        web = psutil.Process([p for p in stack.procs if "uvicorn" in " ".join(p.args)][0].pid)
        idle(web)
        url = f"{stack.url}/jobs/{job.pk}/logs/stream"
        runs = []
        for i in range(args.repeats):
            runs.append(asyncio.run(repeat(url, cookies, args.viewers, web)))
            print(f"repeat {i + 1}: {runs[-1]['opened']} of {args.viewers} streams open in {runs[-1]['open_all_s']} s "
                  f"(refused: {runs[-1]['refused'] or 'none'}); uvicorn CPU "
                  f"{runs[-1]['cpu_s']} s = {runs[-1]['cpu_ms_per_stream']} ms per stream", flush=True)
    median = statistics.median(r["cpu_ms_per_stream"] for r in runs)
    print(f"median of {len(runs)}: {median} ms of server CPU per stream opened")
    record.write("sse_connect", {"viewers": args.viewers, "repeats": runs, "median_cpu_ms_per_stream": median},
                 database=database)


if __name__ == "__main__":
    main()
