"""The submit and the claim in one process, each timed alone: what the two ends of submit -> running cost in the
web server and in the worker, without the HTTP hop, the broker and the machine's other processes in the figure
(which make `submit_latency.py`'s end-to-end medians move by several ms from run to run here).

Each round POSTs one job to ``/api/jobs`` through Django's test client with an API token (middleware, token
check, validation, the job's row and event, the commit, the broker's send, the pool's warning), then calls
``claim_next`` for it as a registered worker would (the first look, the fair order, the transition and its
commit), then marks the job finished so the worker's slot is free again. The connection lives on between
rounds, as the web server's pool and a worker's threads keep theirs. Median of ``--rounds`` after 20 warm-up
rounds, with every sample in the raw file.

    .venv/bin/python bench/submit_cost.py [--rounds 300] [--database postgres://postgres@127.0.0.1:5432/bench_cost]

The broker is the Redis at ``REDIS_URL`` (default redis://127.0.0.1:6379/14); the bench empties that database's
queue afterwards. ``--database`` is created if missing; only the bench's own rows are added to it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from bench.fair_claim import setup  # noqa: E402

SPEC = {"name": "cost", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--database", default="", help="a PostgreSQL URL (default: SQLite in a temporary directory)")
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
    os.environ.setdefault("TRAINHUB_DB_CONN_MAX_AGE", "600")  # one connection for the run, as a pool would keep
    setup(args.database)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from trainhub.api.models import ApiToken
    from trainhub.jobs.models import Job
    from trainhub.pools.models import Worker, WorkerPool
    from trainhub.runs.scheduling import claim_next
    from workers.app import app

    pool, _ = WorkerPool.objects.update_or_create(name="bench-cost", defaults={"queue": "bench-cost"})
    Worker.objects.update_or_create(hostname="bench-cost@bench", defaults={"pool": pool})
    user, _ = get_user_model().objects.get_or_create(username="bench-cost")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, 'bench-cost')[1]}")
    body = json.dumps({**SPEC, "pool": pool.name})
    submits, claims = [], []
    for i in range(20 + args.rounds):
        t0 = time.perf_counter()
        response = client.post("/api/jobs", data=body, content_type="application/json")
        t1 = time.perf_counter()
        assert response.status_code == 201, response.content
        pk = response.json()["id"]
        decision = claim_next(pk, 1, hostname="bench-cost@bench", task_id="bench")
        t2 = time.perf_counter()
        assert decision.job is not None and decision.job.pk == pk, decision
        Job.objects.filter(pk=pk).update(status="succeeded")
        if i >= 20:
            submits.append(t1 - t0)
            claims.append(t2 - t1)
    with app.connection_for_write() as conn:  # the bench's messages: nobody consumes this queue
        conn.default_channel.queue_purge(pool.queue)
    result = {"rounds": args.rounds, "submit_ms_p50": round(statistics.median(submits) * 1e3, 3),
              "claim_ms_p50": round(statistics.median(claims) * 1e3, 3),
              "options": {k: v for k, v in connection.settings_dict["OPTIONS"].items() if k != "pool"},
              "submit_s": submits, "claim_s": claims}
    record.write("submit_cost", result, database=connection.vendor)
    print(f"| {connection.vendor} | {args.rounds} | submit {result['submit_ms_p50']:.2f} ms | "
          f"claim {result['claim_ms_p50']:.2f} ms |")


if __name__ == "__main__":
    main()
