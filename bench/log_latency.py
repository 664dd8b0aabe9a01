"""Latency from a line's print in the job to its arrival at an SSE client, p50/p95.

A script job (bench/log_printer.py) prints timestamped lines at a fixed rate on a real
Celery worker; a real SSE client (httpx, streaming) follows GET /jobs/ID/logs/stream on
uvicorn and subtracts each line's print time from its arrival time (same host clock).

    .venv/bin/python bench/log_latency.py [--rates 10,10000] [--seconds 10]
"""
from __future__ import annotations

import argparse
import json
import threading
import time

import httpx

from log_common import Stack, percentile


def follow(url: str, cookies: dict, result: dict) -> None:
    latencies, seqs = [], []
    with httpx.stream("GET", url, cookies=cookies, timeout=httpx.Timeout(600, connect=10)) as response:
        event = "message"
        for raw in response.iter_lines():
            if raw.startswith("event:"):
                event = raw[6:].strip()
            elif raw.startswith("data:"):
                if event == "end":
                    result["end"] = json.loads(raw[5:])
                    break
                if event != "lines":  # "skipped": a finished log is sent from its newest lines
                    result["skipped"] = json.loads(raw[5:])
                    continue
                now = time.time()
                for seq, _rank, stream, text, *_ in json.loads(raw[5:]):  # [[seq, rank, stream, text], ...]
                    seqs.append(seq)
                    if stream == "o":
                        number, printed = text.split(" ")
                        latencies.append(now - float(printed))
            elif raw == "":
                event = "message"
    result.update(latencies=latencies, seqs=seqs)


def measure(stack: Stack, rate: float, seconds: float) -> None:
    count = max(20, int(rate * seconds))
    job = stack.submit(str(count), str(rate), name=f"latency-{rate:g}")
    result: dict = {}
    client = threading.Thread(target=follow, args=(f"{stack.url}/jobs/{job.pk}/logs/stream", stack.cookies(), result))
    client.start()
    client.join(seconds * 4 + 300)
    job = stack.wait_final(job.pk)
    lat = sorted(result.get("latencies", []))
    seqs = result.get("seqs", [])
    ok = seqs == list(range(len(seqs))) and len(lat) == count
    print(f"{rate:>8g} lines/s: {len(lat)}/{count} lines received, gap-free {ok}; latency p50 "
          f"{percentile(lat, 50) * 1000:.0f} ms, p95 {percentile(lat, 95) * 1000:.0f} ms, "
          f"max {lat[-1] * 1000:.0f} ms (job {job.status})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="10,10000")
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    with Stack() as stack:
        for rate in (float(r) for r in args.rates.split(",")):
            measure(stack, rate, args.seconds)


if __name__ == "__main__":
    main()
