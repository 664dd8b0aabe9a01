"""Where a job's wall time went, from what a bench run left behind: for every job of a var dir (its
SQLite database and run directories), in wall seconds between timestamps the job left behind:

    queued (created_at) → claimed (started_at)
      → the executor's first line stored ("attempt N: starting …": prepare, run dir, config)
      → the runner's first line stored (guard, sandbox, torchrun, Python: the processes started)
      → the runner's loop start (its ``start`` event: torch, the data, the rendezvous)
      → the runner's ``end`` event (training, the last checkpoint, the model file)
      → the runner's last line stored (the ranks' exit, torchrun's, the pipes' last bytes)
      → the executor's "finished: …" line stored (the process group gone, its output collected)
      → the final status (finished_at: the log drained, the outcome recorded)

    .venv/bin/python bench/job_phases.py /tmp/trainhub-cpu-XXXX

Lines are stamped when the executor stores them (``LogLine.at``, once per batch of ~50 ms), so a
phase that ends at a line includes that line's wait in the batch. Wall time: on a loaded machine
only the shape counts (which phase is seconds long). Raw JSON to bench/results/ (bench/record.py).
"""
from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from workers.backends.local import UNSANDBOXED  # noqa: E402

PHASES = ("queued_s", "claim_to_first_line_s", "first_line_to_runner_line_s", "runner_line_to_loop_s",
          "training_s", "end_to_last_runner_line_s", "last_runner_line_to_finished_line_s",
          "finished_line_to_final_status_s")


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def phases(var_dir: Path) -> list[dict]:
    db = sqlite3.connect(var_dir / "trainhub.sqlite3")
    out = []
    for pk, name, created, started, finished in db.execute(
            "SELECT id, name, created_at, started_at, finished_at FROM jobs_job ORDER BY id"):
        events_file = var_dir / "runs" / f"job-{pk}" / "events.jsonl"
        events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
        first = {e["type"]: e["time"] for e in reversed(events)}
        lines = [(_ts(at), stream, text) for at, stream, text in db.execute(
            "SELECT at, stream, text FROM jobs_logline WHERE job_id = ? ORDER BY seq", (pk,))]
        # the worker's own warning of an unsandboxed run is on stderr too: not the runner's first line
        runner = [at for at, stream, text in lines if stream != "s" and text != UNSANDBOXED]
        done = [at for at, stream, text in lines if stream == "s" and text.startswith("finished:")]
        if not (started and finished and "start" in first and "end" in first and lines and runner and done):
            continue
        out.append({"job": pk, "name": name,
                    "queued_s": _ts(started) - _ts(created),
                    "claim_to_first_line_s": lines[0][0] - _ts(started),
                    "first_line_to_runner_line_s": runner[0] - lines[0][0],
                    "runner_line_to_loop_s": first["start"] - runner[0],
                    "training_s": first["end"] - first["start"],
                    "end_to_last_runner_line_s": runner[-1] - first["end"],
                    "last_runner_line_to_finished_line_s": done[-1] - runner[-1],
                    "finished_line_to_final_status_s": _ts(finished) - done[-1],
                    "runner_end_to_final_status_s": _ts(finished) - first["end"]})
    return out


def medians(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per job name, the median of every phase."""
    by_name: dict[str, list[dict]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    return {name: {k: statistics.median(r[k] for r in group) for k in (*PHASES, "runner_end_to_final_status_s")}
            for name, group in by_name.items()}


def main() -> None:
    rows = phases(Path(sys.argv[1]))
    for r in rows:
        print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    summary = medians(rows)
    for name, values in summary.items():
        print(f"median {name}: " + " ".join(f"{k}={v:.2f}" for k, v in values.items()))
    record.write("job_phases", {"var_dir": sys.argv[1], "unit": "wall seconds (loaded machine: shape only)",
                                "jobs": rows, "median_by_name": summary})


if __name__ == "__main__":
    main()
