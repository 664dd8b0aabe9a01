"""Throughput of the log pipeline: a job prints COUNT lines as fast as it can.

Measures lines/s stored (database rows, from the first to the last stored line, as the
bench sees them) and checks the count stored equals the count printed, with every line's
number present exactly once. Runs the real path: script job on a real Celery worker,
executor pump, batches to SQLite and the Redis Stream.

    .venv/bin/python bench/log_throughput.py [--lines 1000000]
"""
from __future__ import annotations

import argparse
import time

from log_common import Stack


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    with Stack(web=False) as stack:
        from django.db.models import Count, Max, Min

        from trainhub.jobs.models import Job, LogLine

        job = stack.submit(str(args.lines), "0", name="log-throughput")
        first = last = None
        while True:
            row = Job.objects.filter(pk=job.pk).values("status", "log_lines").first()
            now = time.monotonic()
            stored = LogLine.objects.filter(job_id=job.pk, stream="o").count() if row["log_lines"] > 1 else 0
            if stored and first is None:
                first = (now, stored)
            if stored >= args.lines:
                last = (now, stored)
                break
            if row["status"] in ("succeeded", "failed", "cancelled"):
                last = (now, stored)
                break
            time.sleep(0.25)
        job = stack.wait_final(job.pk)
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
        assert agg["n"] == args.lines and numbers == set(range(args.lines)), "lines lost or duplicated"


if __name__ == "__main__":
    main()
