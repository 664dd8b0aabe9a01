"""Checkpoints and artifacts: listed and downloaded, and no path ever leaves the job's run directory."""
import io
import tarfile

import pytest

from trainhub.jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job(user, cpu_pool, settings, tmp_path):
    settings.TRAINHUB_RUNS_DIR = tmp_path / "runs"
    job = Job.objects.create(owner=user, name="j", mode="centralized", spec={}, pool=cpu_pool)
    run = tmp_path / "runs" / f"job-{job.pk}"
    (run / "checkpoints" / "step-10").mkdir(parents=True)
    (run / "checkpoints" / "step-10" / "state.pt").write_bytes(b"weights" * 100)
    (run / "checkpoints" / ".tmp-step-20").mkdir()
    (run / "checkpoints" / ".tmp-step-30-a2").mkdir()  # attempt 2 of the job, still writing
    (run / "final").mkdir()
    (run / "final" / "model.pt").write_bytes(b"model")
    (run / "metrics.json").write_text('{"val_acc": 0.9}')
    (tmp_path / "runs" / "secret.txt").write_text("other data")
    (tmp_path / "outside.txt").write_text("not yours")
    (run / "escape").symlink_to(tmp_path / "outside.txt")
    return job


def test_checkpoints_are_listed_without_half_written_ones(api, job):
    found = api.get(f"/api/jobs/{job.pk}/checkpoints").json()
    assert [c["name"] for c in found] == ["step-10"]
    assert found[0]["step"] == 10 and found[0]["files"] == ["state.pt"] and found[0]["size"] == 700


def test_artifacts_list_files_outside_checkpoints_and_skip_escaping_links(api, job):
    paths = [a["path"] for a in api.get(f"/api/jobs/{job.pk}/artifacts").json()]
    assert paths == ["final/model.pt", "metrics.json"]


def test_an_artifact_downloads_as_an_attachment(api, job):
    response = api.get(f"/api/jobs/{job.pk}/files/final/model.pt")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"model"
    assert "attachment" in response["Content-Disposition"]


def test_a_checkpoint_directory_downloads_as_a_tar(api, job):
    response = api.get(f"/api/jobs/{job.pk}/files/checkpoints/step-10")
    assert response.status_code == 200 and response["Content-Type"] == "application/x-tar"
    archive = tarfile.open(fileobj=io.BytesIO(b"".join(response.streaming_content)))
    member = archive.getmember(f"job-{job.pk}-step-10/state.pt")
    assert archive.extractfile(member).read() == b"weights" * 100


@pytest.mark.parametrize("path", [
    "../secret.txt", "final/../../secret.txt", "..%2fsecret.txt", "%2e%2e/secret.txt", "%252e%252e/secret.txt",
    "..%252fsecret.txt", "final%2f..%2f..%2fsecret.txt", "..\\secret.txt", "final\\..\\..\\secret.txt",
    "%00metrics.json", "metrics.json%00.txt", "/etc/passwd", "%2fetc%2fpasswd", "//etc/passwd", "./metrics.json",
    "C:/windows/win.ini", "~/.ssh/id_rsa", "escape", "final/./model.pt",
])
def test_paths_that_leave_the_run_directory_are_refused(api, job, path):
    response = api.get(f"/api/jobs/{job.pk}/files/{path}")
    assert response.status_code in (400, 404), (path, response.status_code)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"other data" not in body and b"not yours" not in body and b"root:" not in body
    if not response.streaming:
        assert response.json()["detail"]


def test_a_missing_file_is_a_clear_404(api, job):
    response = api.get(f"/api/jobs/{job.pk}/files/nothing.bin")
    assert response.status_code == 404 and "nothing.bin" in response.json()["detail"]


def test_a_job_without_a_run_directory_lists_nothing(api, user, cpu_pool, settings, tmp_path):
    settings.TRAINHUB_RUNS_DIR = tmp_path / "empty"
    job = Job.objects.create(owner=user, name="j", mode="centralized", spec={}, pool=cpu_pool)
    assert api.get(f"/api/jobs/{job.pk}/artifacts").json() == []
    assert api.get(f"/api/jobs/{job.pk}/checkpoints").json() == []


def test_a_fifo_in_the_run_directory_is_absent_and_never_blocks(api, job, settings):
    import os

    os.mkfifo(settings.TRAINHUB_RUNS_DIR / f"job-{job.pk}" / "pipe")
    response = api.get(f"/api/jobs/{job.pk}/files/pipe")  # an open() without O_NONBLOCK would hang here
    assert response.status_code == 404
    assert "pipe" not in [a["path"] for a in api.get(f"/api/jobs/{job.pk}/artifacts").json()]


def test_the_listing_stops_walking_at_its_cap(api, job, settings, monkeypatch):
    from trainhub.jobs import runfiles as rundir

    run = settings.TRAINHUB_RUNS_DIR / f"job-{job.pk}"
    for d in range(20):
        (run / f"many-{d:02}").mkdir()
        (run / f"many-{d:02}" / "f.txt").write_text("x")
    scanned = []
    real_scandir = rundir.os.scandir
    monkeypatch.setattr(rundir.os, "scandir", lambda fd: scanned.append(fd) or real_scandir(fd))
    monkeypatch.setattr(rundir, "MAX_LISTED", 3)
    paths = [a["path"] for a in api.get(f"/api/jobs/{job.pk}/artifacts").json()]
    assert paths == ["final/model.pt", "many-00/f.txt", "many-01/f.txt"]
    assert len(scanned) <= 4  # the root, final, many-00, many-01: not all twenty
