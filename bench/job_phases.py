"""Where a job's wall time went, from what a bench run left behind: for every job of a var dir (its
SQLite database and run directories), queued → claimed → the runner's loop start (its ``start``
event: Python, torch, data, rendezvous) → the runner's ``end`` event → the final status.

    .venv/bin/python bench/job_phases.py /tmp/trainhub-cpu-XXXX

Wall time: on a loaded machine only the shape counts (which phase is seconds long). Raw JSON to
bench/results/ (bench/record.py).
"""
from __future__ import annotations

import json
import sqlite3
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402


def phases(var_dir: Path) -> list[dict]:
    db = sqlite3.connect(var_dir / "trainhub.sqlite3")
    ts = lambda s: datetime.fromisoformat(s).timestamp()  # noqa: E731
    out = []
    for pk, name, created, started, finished in db.execute(
            "SELECT id, name, created_at, started_at, finished_at FROM jobs_job ORDER BY id"):
        events_file = var_dir / "runs" / f"job-{pk}" / "events.jsonl"
        events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
        first = {e["type"]: e["time"] for e in reversed(events)}
        if not (started and finished and "start" in first and "end" in first):
            continue
        out.append({"job": pk, "name": name, "queued_s": ts(started) - ts(created),
                    "claim_to_runner_loop_s": first["start"] - ts(started),
                    "training_s": first["end"] - first["start"],
                    "runner_end_to_final_status_s": ts(finished) - first["end"]})
    return out


def main() -> None:
    rows = phases(Path(sys.argv[1]))
    for r in rows:
        print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    record.write("job_phases", {"var_dir": sys.argv[1], "unit": "wall seconds (loaded machine: shape only)",
                                "jobs": rows})


if __name__ == "__main__":
    main()
