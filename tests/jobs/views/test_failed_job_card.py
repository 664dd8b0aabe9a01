"""A failed job's status card names the error (not only "exited with code 1") and links to it."""
import subprocess
import sys

import pytest

from trainhub.jobs import logs
from trainhub.jobs.models import Job

CRASH = """
def step(batch):
    return batch["x"] / 0
step({"x": 1})
"""


@pytest.fixture
def failed(user, cpu_pool, live_settings):
    job = Job.submit(owner=user, name="crash", mode="centralized", spec={}, pool=cpu_pool)
    job.transition("running", reason="claimed")
    # a real Python traceback, as a run's stderr carries it
    crash = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True)
    lines = ["epoch 1 step 10 loss 0.5"] + crash.stderr.splitlines()
    logs.append_lines(job.pk, [logs.Line(i, 0, "e", text) for i, text in enumerate(lines)])
    logs.append_lines(job.pk, [logs.Line(len(lines), 0, "s", "finished: exited with code 1")])
    job.transition("failed", reason="exited with code 1", exit_code=1, error="exited with code 1")
    return job


def test_the_card_shows_the_last_exception_where_it_was_raised_and_links_to_it(user_client, failed):
    html = user_client.get(f"/jobs/{failed.pk}").content.decode()
    card = html[html.index('id="job-status"'):html.index("</section>", html.index('id="job-status"'))]
    assert "ZeroDivisionError: division by zero" in card
    assert "at &lt;string&gt;:3 in step" in card
    seq = next(l.seq for l in logs.tail_lines(failed.pk) if l.text.startswith("ZeroDivisionError"))
    assert f"?line={seq}#L{seq}" in card and f"/jobs/{failed.pk}/logs/first-error" in card


def test_the_closing_line_of_a_failed_run_is_marked_as_a_failure(user_client, failed):
    html = user_client.get(f"/jobs/{failed.pk}").content.decode()
    assert 'class="line s bad"' in html and 'class="line s ok"' not in html


def test_a_run_killed_by_sigkill_says_what_that_usually_means(user_client, user, cpu_pool, live_settings):
    job = Job.submit(owner=user, name="oom", mode="centralized", spec={}, pool=cpu_pool)
    job.transition("running", reason="claimed")
    job.transition("failed", reason="killed by SIGKILL", exit_code=-9, error="killed by SIGKILL")
    card = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert "Killed:" in card and "out-of-memory killer" in card


def test_cuda_out_of_memory_is_named_with_a_fix(user_client, user, cpu_pool, live_settings):
    job = Job.submit(owner=user, name="oom", mode="centralized", spec={}, pool=cpu_pool)
    job.transition("running", reason="claimed")
    logs.append_lines(job.pk, [logs.Line(0, 1, "e", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                    "2.00 GiB"), logs.Line(1, 1, "e", "RuntimeError: rank 1 failed")])
    job.transition("failed", reason="exited with code 1", exit_code=1, error="exited with code 1")
    card = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert "Out of memory:" in card and "lower data.batch_size" in card
