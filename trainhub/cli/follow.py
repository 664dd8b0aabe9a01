"""Follow a job: print its log as it grows and a progress bar, return the exit code of its outcome."""
from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from trainhub.cli.client import CANCELLED_OR_REFUSED, FAILED, OK, Client

FINAL_EXIT = {"succeeded": OK, "failed": FAILED, "cancelled": CANCELLED_OR_REFUSED}


def print_lines(console: Console, lines: list[dict], ranks: bool) -> None:
    for line in lines:
        prefix = f"[{line['rank']}] " if ranks else ""
        # out() writes the text as is: no markup, no highlighting of user output
        console.out(prefix + line["text"], highlight=False)


def follow(client: Client, job_id: int, console: Console, after: int = -1, interval: float = 1.0) -> int:
    """Stream the log after ``after`` until the job is final; returns its exit code (0/1/2)."""
    progress = Progress(TextColumn("job {task.fields[job]} [bold]{task.fields[status]}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                        TimeRemainingColumn(), console=console, transient=True)
    task = progress.add_task("", total=None, job=job_id, status="queued")
    ranks = False
    said = ""  # the waiting reason last printed: printed again only when it changes
    with progress:
        while True:
            page = client.get(f"/api/jobs/{job_id}/logs", after=after, limit=1000)
            lines = page["lines"]
            ranks = ranks or any(line["rank"] for line in lines)
            print_lines(progress.console, lines, ranks)
            after = page["next_after"]
            status = page["job_status"]
            reason = page.get("waiting_reason", "")  # queued, or claimed and held by Slurm
            if reason and reason != said:
                # stderr, beside the summary: stdout stays the job's own log
                Console(stderr=True).print(f"job {job_id} waits: {reason}", style="yellow", markup=False,
                                           highlight=False)
            said = reason
            progress.update(task, status=f"{status} ({reason})" if reason and status == "running" else status,
                            completed=page["step"], total=page["total_steps"] or None)
            if status in FINAL_EXIT and not lines:
                break
            if len(lines) < 1000:
                time.sleep(interval)
    job = client.get(f"/api/jobs/{job_id}")
    summary = f"job {job_id} {job['status']}"
    if job.get("exit_code") is not None:
        summary += f" (exit code {job['exit_code']})"
    if job.get("error"):
        summary += f": {job['error']}"
    Console(stderr=True).print(summary, style="green" if job["status"] == "succeeded" else "red",
                               markup=False, highlight=False)
    return FINAL_EXIT.get(job["status"], FAILED)
