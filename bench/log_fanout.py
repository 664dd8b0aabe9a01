"""Fan-out: VIEWERS concurrent SSE clients follow JOBS running jobs (VIEWERS / JOBS each), each job
printing RATE lines/s.

Latency counts the lines printed after a viewer's stream opened (earlier ones are backlog). The job
waits --wait seconds before its first line, so that the viewers are connected before it prints: the
figure is then the fan-out's, not the connection storm's; the raw file says how many were in time.

Every client checks it got every line once, in order (by its ``id:``); reported: print -> arrival latency
p50/p95 over all clients and lines, and the uvicorn process's resident memory before and
while serving them (psutil). CPU is sampled every 0.5 s (the machine's busy time, uvicorn, the worker, the
jobs' processes, the clients): the raw file has the timeline and the cores each part used while every
job was printing, which says whether the machine itself was the limit. Clients are asyncio + httpx in this process.

    .venv/bin/python bench/log_fanout.py [--viewers 200] [--jobs 1] [--rate 100] [--seconds 10] [--wait auto] [--client-processes 1] [--web-workers 1]

With ``--jobs`` above 1 the one worker runs them all at once (its slots = JOBS); viewer i follows job i mod JOBS.

The coalescing of a hot job's wake-ups is the server's default unless TRAINHUB_SSE_COALESCE_* are set
(the server processes inherit this environment).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

import httpx
import psutil

import record
from log_common import Stack, percentile


async def viewer(client: httpx.AsyncClient, url: str, out: dict) -> None:
    lat, seqs, buf, first = [], [], b"", None
    async with client.stream("GET", url) as response:
        connected = time.time()  # lines printed before this came from the backlog, not live
        async for chunk in response.aiter_raw():
            now = time.time()
            *events, buf = (buf + chunk).split(b"\n\n")
            for event in events:
                if event.startswith(b"event: end"):
                    break
                if not event.startswith(b"event: lines\n"):
                    continue
                # [[SEQ, RANK, "o", "I TIME"], ...]: one JSON array per event
                for seq, _rank, stream, text, *_ in json.loads(event[event.index(b"\ndata: ") + 7:]):
                    seqs.append(seq)
                    if stream == "o":
                        printed = float(text[text.find(" ") + 1:])
                        if printed >= connected:
                            lat.append(now - printed)
                        if first is None:
                            first = printed  # line 0: every viewer gets every line, in order
            else:
                continue
            break
    out.setdefault("lat", []).extend(lat)
    out.setdefault("ok", []).append(seqs == list(range(len(seqs))))
    out.setdefault("counts", []).append(sum(1 for _ in seqs))
    out.setdefault("connected", []).append(connected)
    out.setdefault("first", []).append(first)  # in step with "connected": this viewer's job's line 0


async def clients(urls: list[str], cookies: dict) -> dict:
    """One viewer per url."""
    out: dict = {}
    limits = httpx.Limits(max_connections=len(urls) + 10, max_keepalive_connections=len(urls) + 10)
    async with httpx.AsyncClient(cookies=cookies, limits=limits, timeout=httpx.Timeout(600, connect=30)) as client:
        await asyncio.gather(*(viewer(client, url, out) for url in urls))
    return out


def client_process(urls: list[str], cookies: dict) -> dict:
    """One client process's share of the viewers; returns what they saw and its CPU seconds."""
    out = asyncio.run(clients(urls, cookies))
    return {**out, "cpu": sum(psutil.Process().cpu_times()[:2])}


def split(items: list, parts: int) -> list[list]:
    """``items`` in ``parts`` contiguous shares, as even as can be."""
    sizes = [len(items) // parts + (i < len(items) % parts) for i in range(parts)]
    return [items[sum(sizes[:i]):sum(sizes[:i + 1])] for i in range(parts)]


def tree_cpu(procs, own: bool = True, reaped: bool = False) -> float:
    """User + system CPU seconds of these processes (``own``), and of their children that have exited and
    been waited for (``reaped``; a process adds those of its own reaped children when it is reaped). A
    process that has exited counts nothing here: its parent's ``reaped`` has it. Not a job's processes
    under ``bwrap --unshare-pid``: their CPU reaches no parent's account (measured: a 0.5 CPU-s child adds
    0.01 s to its parent's, 0.54 s without ``--unshare-pid``), so a sandboxed job's curve drops when it
    ends. While every job prints, none has ended, so ``cores_while_printing`` is not affected."""
    total = 0.0
    for p in procs:
        try:
            times = p.cpu_times()
        except psutil.Error:
            continue
        total += (times.user + times.system if own else 0.0) + (
            times.children_user + times.children_system if reaped else 0.0)
    return total


def printing_cores(timeline: list[dict], start: float, end: float) -> dict | None:
    """Cores each part used between ``start`` and ``end`` (the seconds in which every job was printing),
    from the 0.5 s samples: CPU seconds over wall seconds, the machine's busy time included."""
    inside = [s for s in timeline if start <= s["t"] <= end]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    wall = last["t"] - first["t"]
    return {"seconds": round(wall, 1), **{k: round((last[k] - first[k]) / wall, 2) for k in first if k != "t"}}


def stored_latency(job_ids: list[int]) -> dict:
    """Print → stored, per stdout line of these jobs (the row's ``at`` against the time the line carries):
    the worker's part of the latency; p50, p95 and max in ms."""
    from trainhub.jobs.models import LogLine

    rows = LogLine.objects.filter(job_id__in=job_ids, stream="o").values_list("at", "text").iterator(chunk_size=20000)
    lat = [at.timestamp() - float(text.split(" ", 1)[1]) for at, text in rows]
    return {q: round(percentile(lat, q) * 1000, 1) if lat else None for q in (50, 95, 100)}


async def run(stack: Stack, cookies: dict, viewers: int, rate: float, seconds: float, wait: float,
              processes: int = 1, jobs: int = 1) -> None:
    main = psutil.Process([p for p in stack.procs if "uvicorn" in " ".join(p.args)][0].pid)
    web = [main, *main.children(recursive=True)]  # with --workers: the supervisor and its server processes
    rss = lambda: sum(p.memory_info().rss for p in web)  # noqa: E731
    cpu = lambda: tree_cpu(web)  # noqa: E731
    rss0 = rss()
    cpu0, me0 = cpu(), sum(psutil.Process().cpu_times()[:2])
    root = psutil.Process([p for p in stack.procs if "runworker" in " ".join(p.args)][0].pid)
    worker = [root, *[p for p in root.children(recursive=True) if "celery" in " ".join(p.cmdline())]]
    worker0 = tree_cpu(worker)
    count = int(rate * seconds)
    from asgiref.sync import sync_to_async

    submitted = [await sync_to_async(stack.submit)(str(count), str(rate), str(wait), name=f"fanout-{i}")
                 for i in range(jobs)]
    peak = [rss0]
    me_proc = psutil.Process()
    redis = [psutil.Process(stack.redis.proc.pid)]
    timeline: list[dict] = []  # every 0.5 s: cumulative CPU seconds of the machine and of each part

    async def sample():
        while True:
            peak[0] = max(peak[0], rss())
            busy = psutil.cpu_times()
            below = root.children(recursive=True)  # the worker's processes and the jobs' (read once a sample)
            jobs_tree = [c for c in below if c not in worker]
            stack_tree = {p.pid for p in [*web, root, *below, *redis]}
            bench = [me_proc, *(c for c in me_proc.children(recursive=True) if c.pid not in stack_tree)]
            jobs_cpu = tree_cpu(jobs_tree, reaped=True) + tree_cpu(worker, own=False, reaped=True)  # ended ones too
            timeline.append({"t": time.time(), "machine_busy": sum(busy) - busy.idle - getattr(busy, "iowait", 0.0),
                             "uvicorn": tree_cpu(web), "worker": tree_cpu(worker), "jobs": jobs_cpu,
                             "redis": tree_cpu(redis), "clients_and_bench": tree_cpu(bench)})
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    urls = [f"{stack.url}/jobs/{submitted[i % jobs].pk}/logs/stream" for i in range(viewers)]
    if processes == 1:
        out = await clients(urls, cookies)
    else:  # the viewers split over client processes, so that parsing them is not one core's work
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            parts = await asyncio.gather(*(loop.run_in_executor(pool, client_process, share, cookies)
                                           for share in split(urls, processes)))
        out = {k: [x for part in parts for x in part[k]] for k in ("lat", "ok", "counts", "connected", "first")}
        me0 -= sum(part["cpu"] for part in parts)  # their CPU, counted with this process's below
    sampler.cancel()
    lat = out["lat"]
    cpu_s = cpu() - cpu0
    stored = await sync_to_async(stored_latency)([job.pk for job in submitted])
    worker_cpu = tree_cpu(worker) - worker0
    me = sum(psutil.Process().cpu_times()[:2]) - me0
    complete = all(out["ok"]) and min(out["counts"]) >= count
    # connected before its job's line 0 was printed
    in_time = sum(1 for c, f in zip(out["connected"], out["first"]) if f is not None and c <= f)
    # no live sample: every line was printed before the viewers were connected (raise --seconds)
    ms = {q: round(percentile(lat, q) * 1000, 1) if lat else None for q in (50, 95, 100)}
    firsts = [f for f in out["first"] if f is not None]
    phase = printing_cores(timeline, max(firsts), min(firsts) + seconds) if firsts else None
    print(f"{viewers} viewers of {jobs} job(s), {count} lines each at {rate:g} lines/s: all complete and in order: {complete}; "
          f"{in_time}/{viewers} connected before the first line, {len(lat)} live samples; latency p50 {ms[50]} ms, p95 {ms[95]} ms, max {ms[100]} ms; uvicorn RSS "
          f"{rss0 / 2**20:.0f} MiB idle, {peak[0] / 2**20:.0f} MiB peak; CPU seconds: uvicorn {cpu_s:.1f}, these clients {me:.1f}, "
          f"the worker {worker_cpu:.1f}; print → stored p50 {stored[50]} ms, p95 {stored[95]} ms")
    print(f"while every job printed, cores in use (of {psutil.cpu_count()}): {phase}")
    record.write("log_fanout", {"viewers": viewers, "jobs": jobs, "rate": rate, "web_workers": stack.web_workers,
                                "client_processes": processes,
                                "coalesce": {k: os.environ.get(k) for k in ("TRAINHUB_SSE_COALESCE_VIEWERS",
                                                                            "TRAINHUB_SSE_COALESCE_MS")}, "lines": count, "complete_and_in_order": complete,
                                "wait_s": wait, "connected_before_first_line": in_time,
                                "live_samples": len(lat), "latency_ms": ms, "uvicorn_rss_mib": [rss0 / 2**20, peak[0] / 2**20],
                                "cpu_seconds": {"uvicorn": cpu_s, "clients": me, "worker": worker_cpu},
                                "print_to_stored_ms": stored,
                                "cores_while_printing": phase, "cpu_timeline": timeline,
                                "latency_ms_sample": [round(x * 1000, 1) for x in lat[::max(1, len(lat) // 2000)]]}, database=stack.database)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--viewers", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1, help="jobs running at once, VIEWERS / JOBS viewers each")
    parser.add_argument("--rate", type=float, default=100, help="lines/s of each job")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--wait", type=float, default=None,
                        help="seconds the job waits before printing (default: 5 + viewers / 20)")
    parser.add_argument("--client-processes", type=int, default=1,
                        help="processes the viewers are split over (one Python process parses ~100,000 events/s)")
    parser.add_argument("--web-workers", type=int, default=1, help="uvicorn server processes")
    args = parser.parse_args()
    with Stack(web_workers=args.web_workers, slots=args.jobs) as stack:
        cookies = stack.cookies()  # Django's test client: outside the event loop (it is synchronous)
        wait = args.wait if args.wait is not None else 5 + args.viewers / 20
        asyncio.run(run(stack, cookies, args.viewers, args.rate, args.seconds, wait, args.client_processes, args.jobs))


if __name__ == "__main__":
    main()
