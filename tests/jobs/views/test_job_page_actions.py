"""Cancel, resume and clone say what they do before and while they do it."""
import pytest

from trainhub.jobs import rundir
from trainhub.jobs.models import Job

SPEC = {"name": "base", "mode": "centralized", "pool": "cpu",
        "train": {"epochs": 4, "lr": 0.01, "scheduler": "cosine", "warmup_steps": 50, "grad_accum_steps": 4,
                  "max_grad_norm": 1.0}}


@pytest.fixture
def job(user, cpu_pool, live_settings):
    return Job.submit(owner=user, name="base", mode="centralized", spec=SPEC, pool=cpu_pool)


def test_cancel_asks_first_and_a_cancelling_job_says_it_waits_for_its_last_checkpoint(user_client, job, settings):
    settings.TRAINHUB_GRACE_SECONDS = 15
    job.transition("running", reason="claimed")
    page = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert 'hx-confirm="Cancel job #' in page and "It gets 15 s to write its last checkpoint" in page
    card = user_client.post(f"/jobs/{job.pk}/cancel", HTTP_HX_REQUEST="true").content.decode()
    assert "stopping: waiting for the last checkpoint (grace 15 s)" in card
    assert Job.objects.get(pk=job.pk).status == "cancelling"


def test_resume_from_here_opens_the_form_prefilled_and_starts_nothing(user_client, job):
    (rundir.run_dir(job.pk) / "checkpoints" / "step-200").mkdir(parents=True)
    (rundir.run_dir(job.pk) / "checkpoints" / "step-200" / "model.pt").write_bytes(b"x")
    job.transition("running", reason="claimed")
    job.transition("succeeded", reason="exited with code 0", exit_code=0)
    page = user_client.get(f"/jobs/{job.pk}").content.decode()
    link = f"/jobs/new?clone={job.pk}&amp;checkpoint=step-200"
    assert link in page
    form = user_client.get(link.replace("&amp;", "&"))
    assert Job.objects.count() == 1  # nothing launched
    html = form.content.decode()
    assert f"checkpoint step-200 of job #{job.pk}" in html
    assert form.context["form"].initial["lr"] == 0.01 and form.context["form"].initial["epochs"] == 4
    assert f"job-{job.pk}/checkpoints/step-200" in form.context["form"].initial["extra"]


def test_a_clone_names_the_settings_the_form_cannot_show(user_client, job):
    html = user_client.get(f"/jobs/new?clone={job.pk}").content.decode()
    hidden = html[html.index('id="hidden-settings"'):]
    for setting in ("train.scheduler = &quot;cosine&quot;", "train.warmup_steps = 50", "train.grad_accum_steps = 4",
                    "train.max_grad_norm = 1.0"):
        assert setting in hidden
    assert "YAML" in hidden


def test_the_first_eta_counts_the_pace_since_the_first_step_not_the_start_up(user_client, job):
    from datetime import timedelta

    from django.utils import timezone

    from trainhub.jobs.models import Metric

    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(status="running", started_at=now - timedelta(seconds=60), step=20,
                                         total_steps=100)
    # 50 s of start-up, then step 10 at -10 s and step 20 now: one second a step, 80 steps left
    Metric.objects.create(job=job, step=10, name="loss", value=1.0, at=now - timedelta(seconds=10))
    data = user_client.get(f"/jobs/{job.pk}/metrics.json").json()
    assert 75 < data["eta_seconds"] < 90  # not 240 (60 s / 20 steps x 80)
