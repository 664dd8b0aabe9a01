"""Throughput of the log pipeline: a job prints COUNT lines as fast as it can.

Measures lines/s stored (database rows, from the first to the last stored line, as the
bench sees them) and checks the count stored equals the count printed, with every line's
number present exactly once. Runs the real path: script job on a real Celery worker,
executor pump, batches to the database (SQLite, or PostgreSQL when DATABASE_URL names one)
and the Redis Stream. With ``--sse`` a live viewer (another process, httpx) follows the job's
``/jobs/{id}/logs/stream`` from before the first line and counts what arrives: lines/s from
its first to its last stdout line, and every seq once, in order.

    .venv/bin/python bench/log_throughput.py [--lines 1000000] [--sse]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import record
from log_common import Stack


def worker_cpu(stack: Stack) -> float:
    """User + system seconds of the worker and its live children (the printer has exited)."""
    import psutil

    root = psutil.Process(stack.procs[0].pid)
    procs = [p for p in [root, *root.children(recursive=True)] if "log_printer" not in " ".join(p.cmdline())]
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def web_cpu(stack: Stack) -> float:
    import psutil

    return sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in stack.procs if "uvicorn" in " ".join(p.args))


def sse_viewer(url: str, cookies: dict, result) -> None:
    """Follow one job's live log until its end event; put counts and stdout arrival times on ``result``.
    Each ``lines`` event's data is one JSON array, parsed whole (the viewer shares the machine's cores
    with what it measures)."""
    import json

    import httpx

    seqs_in_order, lines, events, stdout, first, last, buf = True, 0, 0, 0, None, None, b""
    with httpx.Client(cookies=cookies, timeout=httpx.Timeout(600, connect=30)) as client:
        with client.stream("GET", url) as response:
            for chunk in response.iter_raw():
                now = time.time()
                *frames, buf = (buf + chunk).split(b"\n\n")
                for frame in frames:
                    if frame.startswith(b"event: end"):
                        result.put({"lines": lines, "events": events, "stdout": stdout, "in_order": seqs_in_order,
                                    "first": first, "last": last, "viewer_cpu_s": time.process_time()})
                        return
                    if not frame.startswith(b"event: lines\n"):
                        continue
                    events += 1
                    before = stdout
                    for line in json.loads(frame[frame.index(b"\ndata: ") + 7:]):
                        seqs_in_order &= line[0] == lines
                        lines += 1
                        stdout += line[2] == "o"
                    if stdout > before:
                        first = first or now
                        last = now
    result.put({"lines": lines, "events": events, "stdout": stdout, "in_order": seqs_in_order, "first": first,
                "last": last, "error": "the stream ended without its end event"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--sse", action="store_true", help="also count the lines a live SSE viewer receives")
    args = parser.parse_args()
    # the pipeline, not retention: the default keeps 1,000,000 lines per job, and the runner's own lines
    # beside the printed ones would make it cut the middle (a correct cut, but not a count to check)
    os.environ.setdefault("TRAINHUB_LOG_RETENTION", "*=0")
    with Stack(web=args.sse) as stack:
        from django.db.models import Count, Max, Min

        from trainhub.jobs.models import Job, LogLine

        time.sleep(3)  # let the worker finish starting
        cpu0, web0 = worker_cpu(stack), web_cpu(stack) if args.sse else 0.0
        # with a viewer, the job waits 3 s before printing: the viewer is connected before line 0
        job = stack.submit(str(args.lines), "0", *(["3"] if args.sse else []), name="log-throughput")
        if args.sse:
            result = multiprocessing.get_context("spawn").Queue()
            viewer = multiprocessing.get_context("spawn").Process(
                target=sse_viewer, args=(f"{stack.url}/jobs/{job.pk}/logs/stream", stack.cookies(), result))
            viewer.start()
        first = last = None
        while True:
            row = Job.objects.filter(pk=job.pk).values("status", "log_lines").first()
            now = time.monotonic()
            stored = max(0, row["log_lines"] - 1)  # the executor's "starting" line comes first; cheap to poll
            if stored and first is None:
                first = (now, stored)
            if stored >= args.lines:
                last = (now, stored)
                break
            if row["status"] in ("succeeded", "failed", "cancelled"):
                last = (now, stored)
                break
            time.sleep(0.1)
        job = stack.wait_final(job.pk)
        cpu = worker_cpu(stack) - cpu0
        live = None
        if args.sse:
            live = result.get(timeout=600)
            viewer.join(30)
            live["lines_per_s"] = live["stdout"] / (live["last"] - live["first"]) if live["stdout"] > 1 else None
            live["web_cpu_s"] = web_cpu(stack) - web0  # uvicorn, from before the job to its end event
            print(f"live SSE viewer: {live['stdout']:,} stdout lines of {live['lines']:,} in {live['events']:,} events, "
                  f"seqs in order: "
                  f"{live['in_order']}; {live['lines_per_s'] or float('nan'):,.0f} lines/s arriving; "
                  f"CPU: web server {live['web_cpu_s']:.1f} s, viewer {live.get('viewer_cpu_s', 0):.1f} s")
        out = LogLine.objects.filter(job_id=job.pk, stream="o")
        agg = out.aggregate(n=Count("id"), lo=Min("seq"), hi=Max("seq"))
        numbers = {int(t.split(" ", 1)[0]) for t in out.values_list("text", flat=True).iterator(chunk_size=20000)}
        rate = (last[1] - first[1]) / (last[0] - first[0]) if last[0] > first[0] else float("nan")
        at = out.aggregate(a=Min("at"), b=Max("at"))
        span = (at["b"] - at["a"]).total_seconds()
        print(f"job {job.pk} {job.status}: printed {args.lines}, stored {agg['n']} stdout lines "
              f"({len(numbers)} distinct numbers, all present: {numbers == set(range(args.lines))})")
        print(f"stored lines/s (bench polling): {rate:,.0f}")
        print(f"stored lines/s (row timestamps, first to last): {agg['n'] / span if span else float('nan'):,.0f} "
              f"over {span:.2f}s")
        print(f"worker CPU for this job (claim, launch, pump, store, publish): {cpu:.1f}s "
              f"= {agg['n'] / cpu:,.0f} lines per CPU-second")
        exact = agg["n"] == args.lines and numbers == set(range(args.lines))
        record.write("log_throughput", {"lines": args.lines, "stored": agg["n"], "exact": exact,
                                        "lines_per_s_polling": rate, "lines_per_s_rows": agg["n"] / span if span else None,
                                        "worker_cpu_s": cpu, "retention": os.environ["TRAINHUB_LOG_RETENTION"],
                                        "database": stack.database, "sse": live}, database=stack.database)
        assert exact, "lines lost or duplicated"
        if live is not None:
            assert live["stdout"] == args.lines and live["in_order"] and not live.get("error"), \
                "the live viewer missed, repeated or reordered lines"


if __name__ == "__main__":
    main()
