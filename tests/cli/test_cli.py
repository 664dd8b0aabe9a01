"""The `trainhub` CLI in a subprocess against a real web server (uvicorn) on the test database."""
import json
import stat

import pytest
import yaml

from trainhub.jobs.models import Job, LogLine

pytestmark = pytest.mark.slow

SPEC = {"name": "digits-mlp", "pool": "cpu", "train": {"epochs": 1}}


@pytest.fixture
def no_worker_needed(cpu_pool):
    return cpu_pool


def write_spec(tmp_path, spec, name="job.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_login_checks_the_token_and_saves_it_readable_by_the_owner_only(trainhub, web_server, token, tmp_path):
    env = {"TRAINHUB_URL": "", "TRAINHUB_TOKEN": ""}
    bad = trainhub("login", "--url", web_server.url, "--token", "th_wrong", env_extra=env)
    assert bad.returncode == 3 and "refused the token" in bad.stderr
    good = trainhub("login", "--url", web_server.url, "--token", token, env_extra=env)
    assert good.returncode == 0, good.stderr
    config = tmp_path / "cli" / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": web_server.url, "token": token}
    assert trainhub("ls", env_extra=env).returncode == 0  # uses the saved config


def test_without_configuration_it_says_how_to_log_in(trainhub):
    result = trainhub("ls", env_extra={"TRAINHUB_URL": "", "TRAINHUB_TOKEN": ""})
    assert result.returncode == 3 and "trainhub login" in result.stderr


def test_a_spec_error_prints_each_field_and_exits_2(trainhub, no_worker_needed, tmp_path):
    path = write_spec(tmp_path, {"name": "x", "pool": "cpu", "train": {"lr": -1, "epocs": 1}})
    result = trainhub("submit", str(path))
    assert result.returncode == 2
    assert "train.lr:" in result.stderr and "train.epocs: unknown key" in result.stderr
    assert Job.objects.count() == 0


def test_broken_yaml_is_refused_before_sending(trainhub, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: [unclosed\n")
    result = trainhub("submit", str(path))
    assert result.returncode == 2 and "not valid YAML" in result.stderr


def test_submit_ls_status_clone_and_cancel(trainhub, no_worker_needed, tmp_path, monkeypatch):
    submitted = trainhub("submit", str(write_spec(tmp_path, SPEC)), "--name", "from-cli")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip())
    assert Job.objects.get(pk=job_id).name == "from-cli"

    listing = trainhub("ls")
    assert listing.returncode == 0 and "from-cli" in listing.stdout
    shown = trainhub("status", str(job_id), "--json")
    assert json.loads(shown.stdout)["status"] in ("queued", "running")

    cloned = trainhub("clone", str(job_id), "-o", "copy.yaml")
    assert cloned.returncode == 0, cloned.stderr
    spec = yaml.safe_load((tmp_path / "copy.yaml").read_text())
    assert spec["name"] == "from-cli-copy" and spec["train"]["epochs"] == 1

    cancelled = trainhub("cancel", str(job_id))
    assert cancelled.returncode == 0 and f"job {job_id} cancel" in cancelled.stdout
    assert trainhub("status", "999999").returncode == 3


def test_logs_print_every_line_and_follow_exits_with_the_outcome(trainhub, user, no_worker_needed):
    job = Job.objects.create(owner=user, name="done", mode="centralized", spec={}, pool=no_worker_needed)
    LogLine.objects.bulk_create([LogLine(job=job, seq=i, text=f"line [bold]{i}[/bold]") for i in range(3)])
    job.transition("running")
    job.transition("failed", exit_code=1, error="loss diverged")
    logs = trainhub("logs", str(job.pk))
    assert logs.stdout.splitlines() == [f"line [bold]{i}[/bold]" for i in range(3)]  # printed as is
    followed = trainhub("logs", "-f", str(job.pk))
    assert followed.returncode == 1 and "loss diverged" in followed.stderr


def test_files_and_download_of_an_artifact_and_a_checkpoint(trainhub, user, no_worker_needed, live_settings, tmp_path):
    import tarfile

    job = Job.objects.create(owner=user, name="art", mode="centralized", spec={}, pool=no_worker_needed)
    run = live_settings.TRAINHUB_RUNS_DIR / f"job-{job.pk}"
    (run / "checkpoints" / "step-4").mkdir(parents=True)
    (run / "checkpoints" / "step-4" / "state.pt").write_bytes(b"s" * 2000)
    (run / "final").mkdir()
    (run / "final" / "model.pt").write_bytes(b"m" * 5000)
    listing = trainhub("files", str(job.pk))
    assert "checkpoints/step-4/" in listing.stdout and "final/model.pt" in listing.stdout
    got = trainhub("download", str(job.pk), "final/model.pt")
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "model.pt").read_bytes() == b"m" * 5000
    got = trainhub("download", str(job.pk), "checkpoints/step-4", "-o", "ckpt.tar")
    assert got.returncode == 0, got.stderr
    assert tarfile.open(tmp_path / "ckpt.tar").getnames() == [f"job-{job.pk}-step-4/state.pt"]
    refused = trainhub("download", str(job.pk), "../../etc/passwd")
    assert refused.returncode == 3 and not (tmp_path / "passwd").exists()


@pytest.mark.db_agnostic  # the live log on PostgreSQL: tests/e2e/test_live_log.py
def test_submit_follow_runs_a_digits_job_to_success_and_prints_its_log(trainhub, start_worker, cpu_pool, tmp_path):
    worker = start_worker("cpu")
    path = write_spec(tmp_path, {"name": "cli-digits", "pool": "cpu", "data": {"dataset": "digits"},
                                 "train": {"epochs": 2, "lr": 0.003}})
    result = trainhub("submit", str(path), "--follow", timeout=240)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:], worker.output()[-2000:])
    assert "epoch 2/2" in result.stdout and "val_acc" in result.stdout
    assert "succeeded" in result.stderr


def test_templates_save_list_and_start_with_overrides(trainhub, no_worker_needed, tmp_path):
    path = write_spec(tmp_path, SPEC)
    saved = trainhub("save-template", "baseline", str(path), "--description", "quick digits")
    assert saved.returncode == 0, saved.stderr
    assert "baseline" in trainhub("templates").stdout
    started = trainhub("start", "baseline", "--set", "train.epochs=4", "--set", "name=swept")
    assert started.returncode == 0, started.stderr
    job = Job.objects.get(pk=int(started.stdout.strip()))
    assert job.name == "swept" and job.spec["train"]["epochs"] == 4
    assert trainhub("start", "nope").returncode == 3
    refused = trainhub("submit", str(path), "--set", "train.lr=-1")
    assert refused.returncode == 2 and "train.lr" in refused.stderr


def test_submit_follow_says_why_the_job_waits_instead_of_hanging_silently(trainhub, no_worker_needed, tmp_path):
    import threading
    import time

    from trainhub.jobs.services import job_cancel

    result = {}
    follower = threading.Thread(target=lambda: result.update(done=trainhub("submit", str(write_spec(tmp_path, SPEC)),
                                                                          "--follow", timeout=90)))
    follower.start()
    deadline = time.monotonic() + 30
    while not Job.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # the follower has polled a few times while the job waits
    job_cancel(Job.objects.get())
    follower.join(90)
    done = result["done"]
    assert "warning: no worker of pool cpu is online" in done.stderr  # at submit
    assert done.stderr.count("waits: no worker of pool cpu is online") == 1  # while following, once per change
    assert done.returncode == 2 and "cancelled" in done.stderr


def test_login_reads_the_token_from_standard_input_or_a_file_not_the_command_line(trainhub, web_server, token,
                                                                                   tmp_path):
    env = {"TRAINHUB_URL": "", "TRAINHUB_TOKEN": ""}
    piped = trainhub("login", "--url", web_server.url, "--token-file", "-", env_extra=env, input=token + "\n")
    assert piped.returncode == 0, piped.stderr
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["token"] == token
    (tmp_path / "token").write_text(token)
    from_file = trainhub("login", "--url", web_server.url, "--token-file", str(tmp_path / "token"), env_extra=env)
    assert from_file.returncode == 0, from_file.stderr
    empty = trainhub("login", "--url", web_server.url, "--token-file", "-", env_extra=env, input="")
    assert empty.returncode == 2 and "no token in it" in empty.stderr  # refused input, as a bad spec
