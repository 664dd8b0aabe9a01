"""Tunables are read once, in trainhub/settings.py: a bad value stops startup with one line naming
the variable, and the one grace period (TRAINHUB_GRACE_SECONDS) reaches the job's guard and runner,
its three old names still working with a deprecation warning."""
from __future__ import annotations

import pytest

from tests.conftest import wait_for
from tests.security.test_deployment import assert_stopped_with_one_line, manage
from workers.runner import signals

OLD_GRACE_NAMES = ("TRAINHUB_KILL_GRACE_SECONDS", "TRAINHUB_GUARD_GRACE_SECONDS", "TRAINHUB_STOP_GRACE_S")


@pytest.mark.parametrize("command", [("check",), ("up", "--no-worker")])
@pytest.mark.parametrize("name, value, expected", [
    ("TRAINHUB_PORT", "abc", "TRAINHUB_PORT='abc' is not an integer; set a whole number"),
    ("TRAINHUB_EMBEDDED_REDIS_PORT", "70000", "TRAINHUB_EMBEDDED_REDIS_PORT=70000 is above 65535; lower it"),
    ("TRAINHUB_HEARTBEAT_SECONDS", "0", "TRAINHUB_HEARTBEAT_SECONDS=0 is below 1; raise it"),
    ("TRAINHUB_GANG_TIMEOUT_SECONDS", "2m", "TRAINHUB_GANG_TIMEOUT_SECONDS='2m' is not a number"),
    ("TRAINHUB_GRACE_SECONDS", "soon", "TRAINHUB_GRACE_SECONDS='soon' is not an integer"),
    ("TRAINHUB_KILL_GRACE_SECONDS", "-1", "TRAINHUB_KILL_GRACE_SECONDS=-1 is below 0; raise it"),
])
def test_a_malformed_tunable_stops_startup_with_one_line_naming_it(tmp_path, command, name, value, expected):
    assert_stopped_with_one_line(manage(tmp_path, *command, **{name: value}), expected)


def grace_of(tmp_path, **env) -> tuple[str, str]:
    result = manage(tmp_path, "shell", "-c", "from django.conf import settings; print(settings.TRAINHUB_GRACE_SECONDS)",
                    **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1], result.stderr


def test_the_grace_period_is_one_setting_with_a_default(tmp_path):
    value, warnings = grace_of(tmp_path)
    assert value == "15" and "deprecated" not in warnings
    value, warnings = grace_of(tmp_path, TRAINHUB_GRACE_SECONDS="4", TRAINHUB_KILL_GRACE_SECONDS="9")
    assert value == "4" and "deprecated" not in warnings  # the new name wins; the old one is not read


@pytest.mark.parametrize("old", OLD_GRACE_NAMES)
def test_an_old_grace_name_still_takes_effect_with_a_deprecation_warning(tmp_path, old):
    value, warnings = grace_of(tmp_path, **{old: "3"})
    assert value == "3"
    assert f"{old} is deprecated: set TRAINHUB_GRACE_SECONDS instead" in warnings


def test_the_runner_reads_the_new_grace_name_and_the_old_one_with_a_warning(monkeypatch, capsys):
    monkeypatch.delenv("TRAINHUB_GRACE_SECONDS", raising=False)
    monkeypatch.setenv("TRAINHUB_STOP_GRACE_S", "2")
    assert signals.grace_seconds() == 2
    assert "TRAINHUB_STOP_GRACE_S is deprecated" in capsys.readouterr().err
    monkeypatch.setenv("TRAINHUB_GRACE_SECONDS", "6")
    assert signals.grace_seconds() == 6
    assert capsys.readouterr().err == ""


PRINT_GRACE = 'import os\nprint("grace", os.environ.get("TRAINHUB_GRACE_SECONDS"), flush=True)\n'


@pytest.mark.slow
@pytest.mark.parametrize("worker_env, seen", [({"TRAINHUB_GRACE_SECONDS": "7"}, "7"),
                                               ({"TRAINHUB_GUARD_GRACE_SECONDS": "1"}, "1")])
def test_the_worker_hands_its_grace_to_the_jobs_guard_and_runner(start_worker, cpu_pool, user, tmp_path,
                                                                 worker_env, seen):
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "grace.py").write_text(PRINT_GRACE)
    Workspace.objects.create(name="grace", path=str(tmp_path / "ws"))
    worker = start_worker("cpu", extra_env=worker_env)
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": "grace", "entry": "grace.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to finish")
    assert done.status == "succeeded", done.error
    assert f"grace {seen}" in [line.text for line in logs.read_lines(job.pk, limit=1000)]
    assert ("deprecated" in worker.output()) == ("TRAINHUB_GRACE_SECONDS" not in worker_env)
