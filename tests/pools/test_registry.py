"""What a worker registers about its host, and how finished jobs' logs are trimmed."""
import pytest
from django.core.exceptions import ValidationError

from trainhub.jobs.models import Job, LogLine
from trainhub.pools import gpus
from trainhub.pools.models import WorkerPool
from trainhub.pools.registry import host_info


def test_declared_fake_gpus_are_listed_by_index(monkeypatch):
    monkeypatch.setenv("TRAINHUB_FAKE_GPUS", "4")
    assert [g["index"] for g in gpus.inventory()] == [0, 1, 2, 3]


def test_a_bad_fake_gpu_count_says_how_to_fix_it(monkeypatch):
    monkeypatch.setenv("TRAINHUB_FAKE_GPUS", "four")
    with pytest.raises(ValueError, match="whole number"):
        gpus.inventory()


def test_a_machine_without_nvidia_driver_has_no_gpus(monkeypatch):
    monkeypatch.delenv("TRAINHUB_FAKE_GPUS", raising=False)
    assert gpus.inventory() == []  # NVML is installed but finds no driver here


def test_host_info_names_cpus_memory_and_versions_without_importing_torch(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    info = host_info()
    assert info["cpus"] >= 1 and info["memory_gb"] > 0 and info["torch"]
    assert "torch" not in sys.modules


def test_a_finished_job_keeps_its_first_and_newest_lines_with_a_marker(cpu_pool, user):
    from workers.tasks import _trim_logs

    WorkerPool.objects.filter(pk=cpu_pool.pk).update(log_retention_lines=30)
    cpu_pool.refresh_from_db()
    job = Job.objects.create(owner=user, name="j", mode="centralized", spec={}, pool=cpu_pool, status="succeeded")
    LogLine.objects.bulk_create([LogLine(job=job, seq=i, text=f"line {i}") for i in range(100)])
    _trim_logs(job)
    texts = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert texts[:3] == ["line 0", "line 1", "line 2"] and texts[-1] == "line 99"
    assert len(texts) <= 31 and any(t.startswith("✂ lines") for t in texts)


def test_a_retention_below_the_safe_minimum_is_refused_in_the_admin(cpu_pool):
    cpu_pool.log_retention_lines = 500
    with pytest.raises(ValidationError, match="at least"):
        cpu_pool.full_clean()
