"""What a worker registers about its host, and how finished jobs' logs are trimmed."""
import pytest

from trainhub.jobs.models import Job, LogLine
from trainhub.pools import gpus
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


def test_a_finished_job_keeps_only_the_pools_retained_lines(cpu_pool, user):
    from workers.tasks import _trim_logs

    cpu_pool.log_retention_lines = 3
    cpu_pool.save()
    job = Job.objects.create(owner=user, name="j", mode="centralized", spec={}, pool=cpu_pool, status="succeeded")
    LogLine.objects.bulk_create([LogLine(job=job, seq=i, text=f"line {i}") for i in range(10)])
    _trim_logs(job)
    assert list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True)) == [
        "line 7", "line 8", "line 9"]
