"""The job page of a job with LINES stored lines: time to first byte and to the whole page
(httpx through uvicorn), and time to the first rendered log lines in headless Chromium when
/usr/bin/chromium exists. Also times a search and the first-error jump over the whole log.

    .venv/bin/python bench/log_page.py [--lines 1000000] [--runs 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import httpx

from log_common import Stack


def fill(job_id: int, total: int) -> None:
    from trainhub.jobs import logs

    batch = 20_000
    for start in range(0, total, batch):
        logs.append_lines(job_id, [(seq, seq % 2, "e" if seq % 1000 == 7 else "o",
                                    f"\x1b[32mstep {seq}\x1b[0m loss {1 / (seq + 1):.6f} lr 0.001"
                                    if seq != total * 9 // 10 else "RuntimeError: CUDA error: out of memory")
                                   for seq in range(start, min(total, start + batch))])


def timed_get(client: httpx.Client, url: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    with client.stream("GET", url) as response:
        assert response.status_code < 400, response.status_code
        first = time.perf_counter()  # headers arrived (a redirect has no body)
        for i, _ in enumerate(response.iter_raw()):
            if i == 0:
                first = time.perf_counter()
    return first - t0, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with Stack() as stack:
        from trainhub.jobs.models import Job
        from trainhub.pools.models import WorkerPool

        job = Job.objects.create(owner=stack.user, name="big-log", mode="ddp", pool=WorkerPool.objects.get(name="cpu"),
                                 spec={"resources": {"procs_per_node": 2}}, status="succeeded")
        t0 = time.perf_counter()
        fill(job.pk, args.lines)
        print(f"stored {args.lines:,} lines in {time.perf_counter() - t0:.1f}s")
        with httpx.Client(base_url=stack.url, cookies=stack.cookies(), timeout=60) as client:
            for name, url in (("job page", f"/jobs/{job.pk}"), ("load older", f"/jobs/{job.pk}/logs/page?before=500000"),
                              ("search (1 match)", f"/jobs/{job.pk}/logs/search?q=step 123457 "),
                              ("first error", f"/jobs/{job.pk}/logs/first-error")):
                timed_get(client, url)  # warm
                runs = [timed_get(client, url) for _ in range(args.runs if "search" not in name else 3)]
                print(f"{name:>18}: time to first byte median {statistics.median(r[0] for r in runs) * 1000:.0f} ms, "
                      f"whole response {statistics.median(r[1] for r in runs) * 1000:.0f} ms")
        if Path("/usr/bin/chromium").exists():
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
            from playwright.sync_api import sync_playwright

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                context = browser.new_context()
                context.add_cookies([{"name": k, "value": v, "url": stack.url} for k, v in stack.cookies().items()])
                page = context.new_page()
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    page.goto(f"{stack.url}/jobs/{job.pk}", wait_until="commit")
                    page.locator(f"#L{args.lines - 1}").wait_for()
                    times.append(time.perf_counter() - t0)
                print(f"Chromium: navigation to last log line rendered, median {statistics.median(times) * 1000:.0f} ms")
                browser.close()


if __name__ == "__main__":
    main()
