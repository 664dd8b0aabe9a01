"""What the page tests and the screenshot script share: a browser logged in as a test user, and
jobs in the states a newcomer asks about (waiting, failed with a real traceback, comparable runs)."""
from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from datetime import timedelta

from django.utils import timezone

from tests.asgi_server import session_cookie
from tests.e2e.browser import CHROMIUM
from trainhub.jobs import logs
from trainhub.jobs.models import Job, Metric

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
CRASH = 'def step(batch):\n    return batch["x"] / 0\nstep({"x": 1})\n'


@contextmanager
def browser_pages(web, client):
    """``new_page(viewport=…, dark=…)``: pages of one Chromium, logged in as ``client``'s user."""
    from playwright.sync_api import sync_playwright

    cookie = session_cookie(client)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM),
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            def new_page(viewport=DESKTOP, dark=False, mobile=False):
                context = browser.new_context(viewport=viewport, color_scheme="dark" if dark else "light",
                                              is_mobile=mobile, has_touch=mobile, device_scale_factor=1)
                context.add_cookies([{"name": k, "value": v, "url": web.url} for k, v in cookie.items()])
                page = context.new_page()
                page.set_default_timeout(15_000)
                return page
            yield new_page
        finally:
            browser.close()


def finished_job(user, pool, name: str, lr: float, losses: list[float], status: str = "succeeded") -> Job:
    """A run that reported loss and accuracy per step, then ended with ``status``."""
    spec = {"name": name, "mode": "centralized", "pool": pool.name, "train": {"epochs": 3, "lr": lr}}
    job = Job.submit(owner=user, name=name, mode="centralized", spec=spec, pool=pool)
    job.transition("running", reason="claimed by test-worker")
    for i, loss in enumerate(losses, start=1):
        logs.record_metrics(job.pk, i * 10, {"loss": loss, "accuracy": 1 - loss / 3})
    logs.record_progress(job.pk, len(losses) * 10, len(losses) * 10)
    lines = [f"epoch 1 step {i * 10} loss {loss}" for i, loss in enumerate(losses, start=1)]
    logs.append_lines(job.pk, [logs.Line(i, 0, "o", text) for i, text in enumerate(lines)])
    seq = len(lines)
    if status == "failed":
        crash = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True).stderr.splitlines()
        logs.append_lines(job.pk, [logs.Line(seq + i, 0, "e", text) for i, text in enumerate(crash)])
        seq += len(crash)
    outcome = "exited with code 0" if status == "succeeded" else "exited with code 1"
    logs.append_lines(job.pk, [logs.Line(seq, 0, "s", f"finished: {outcome}")])
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=4))
    job.transition(status, reason=outcome, exit_code=0 if status == "succeeded" else 1,
                   error="" if status == "succeeded" else outcome)
    return job


def running_job(user, pool, name: str, step: int, total: int) -> Job:
    job = Job.submit(owner=user, name=name, mode="ddp", spec={"name": name, "mode": "ddp"}, pool=pool)
    job.transition("running", reason="claimed by test-worker")
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=3))
    logs.record_progress(job.pk, step, total)
    Metric.objects.create(job=job, step=1, name="loss", value=2.0, at=timezone.now() - timedelta(minutes=2))
    return job
