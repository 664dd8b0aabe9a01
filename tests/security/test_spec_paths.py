"""A spec's paths (``data.path``, ``llm.base_model``, ``llm.tokenizer``) reach only what the job's owner
may read: their own jobs' run directories and the data roots registered for them. Refused at submit
with the field named and the allowed places listed; refused again on the worker for a row written past
the submit check, before anything opens the path; a sandboxed job sees the data root its spec names.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import wait_for

LLM = {"mode": "llm", "train": {"epochs": 1, "max_steps": 4, "log_every_steps": 2},
       "llm": {"seq_len": 32, "sample_tokens": 4}}
CORPUS = "the quick brown fox jumps over the lazy dog. " * 200


def llm_spec(**paths) -> dict:
    spec = {**LLM, "data": {}, "llm": dict(LLM["llm"])}
    if "data_path" in paths:
        spec["data"]["path"] = paths["data_path"]
    if "base_model" in paths:
        spec["llm"]["base_model"] = paths["base_model"]
    if "tokenizer" in paths:
        spec["llm"]["tokenizer"] = paths["tokenizer"]
    return spec


@pytest.fixture
def bobs_run_dir(bob, cpu_pool, live_settings):
    """Bob's finished LLM job's run directory with his corpus, model and tokenizer in it."""
    from trainhub.jobs.models import Job
    from trainhub.jobs.rundir import run_dir

    job = Job.submit(owner=bob, name="bobs-llm", mode="llm", spec={"name": "bobs-llm", "mode": "llm"}, pool=cpu_pool)
    folder = run_dir(job.pk)
    (folder / "model" / "tokenizer").mkdir(parents=True)
    (folder / "corpus.txt").write_text("bob's private corpus " * 100)
    (folder / "model" / "config.json").write_text("{}")
    (folder / "model" / "tokenizer" / "tokenizer.json").write_text("{}")
    return folder


def submit(client, spec: dict):
    return client.post("/api/jobs", spec, content_type="application/json")


@pytest.mark.parametrize("field,paths", [
    ("data.path", {"data_path": "corpus.txt"}),
    ("llm.base_model", {"base_model": "model"}),
    ("llm.tokenizer", {"tokenizer": "model/tokenizer"}),
])
def test_a_path_into_another_users_run_directory_is_refused_at_submit_naming_the_field(
        user_client, bobs_run_dir, field, paths):
    spec = llm_spec(**{k: str(bobs_run_dir / v) for k, v in paths.items()})
    response = submit(user_client, spec)
    assert response.status_code == 422, response.content
    body = response.json()["errors"][field]
    assert list(response.json()["errors"]) == [field] and "outside the places your jobs may read" in body
    assert "your own jobs' run directories" in body and "no data root is registered for you" in body


@pytest.mark.parametrize("escape", [
    "{mine}/../{bob}/corpus.txt",  # .. out of one's own run directory
    "{mine}/link/corpus.txt",  # a symlink planted in one's own run directory
    "/etc/passwd",  # any other file of the worker
    "corpus.txt",  # relative: to where?
    "{runs}",  # the runs root itself
])
def test_escapes_from_ones_own_run_directory_are_refused(user, user_client, cpu_pool, bobs_run_dir, escape):
    from trainhub.jobs.models import Job
    from trainhub.jobs.rundir import run_dir

    mine = run_dir(Job.submit(owner=user, name="mine", mode="llm", spec={"name": "mine"}, pool=cpu_pool).pk)
    mine.mkdir(parents=True)
    (mine / "link").symlink_to(bobs_run_dir)
    path = escape.format(mine=mine, bob=bobs_run_dir.name, runs=mine.parent)
    response = submit(user_client, llm_spec(data_path=path))
    assert response.status_code == 422, response.content
    assert "data.path" in response.content.decode()


def test_a_path_in_ones_own_run_directory_passes_the_check(user, user_client, cpu_pool, live_settings):
    from trainhub.jobs.models import Job
    from trainhub.jobs.rundir import run_dir

    mine = run_dir(Job.submit(owner=user, name="mine", mode="llm", spec={"name": "mine"}, pool=cpu_pool).pk)
    mine.mkdir(parents=True)
    (mine / "corpus.txt").write_text(CORPUS)
    response = submit(user_client, llm_spec(data_path=str(mine / "corpus.txt")))
    assert response.status_code == 201, response.content


def test_a_data_root_is_open_to_its_groups_only_and_named_in_the_refusal(user, user_client, cpu_pool, tmp_path):
    from django.contrib.auth.models import Group

    from trainhub.pools.models import DataRoot

    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "corpus.txt").write_text(CORPUS)
    (tmp_path / "vision").mkdir()
    (tmp_path / "vision" / "corpus.txt").write_text(CORPUS)
    DataRoot.objects.create(name="shared", path=str(tmp_path / "shared"))
    vision = DataRoot.objects.create(name="vision", path=str(tmp_path / "vision"))
    team = Group.objects.create(name="vision-team")
    vision.groups.add(team)

    assert submit(user_client, llm_spec(data_path=str(tmp_path / "shared" / "corpus.txt"))).status_code == 201
    refused = submit(user_client, llm_spec(data_path=str(tmp_path / "vision" / "corpus.txt")))
    assert refused.status_code == 422
    message = refused.json()["errors"]["data.path"]
    assert f"shared ({tmp_path / 'shared'})" in message and "vision (" not in message
    user.groups.add(team)
    assert submit(user_client, llm_spec(data_path=str(tmp_path / "vision" / "corpus.txt"))).status_code == 201


def test_a_data_root_above_the_runs_root_does_not_open_other_users_run_directories(user_client, bobs_run_dir):
    from trainhub.pools.models import DataRoot

    DataRoot.objects.create(name="everything", path=str(bobs_run_dir.parent.parent))
    response = submit(user_client, llm_spec(data_path=str(bobs_run_dir / "corpus.txt")))
    assert response.status_code == 422 and "data.path" in response.content.decode()


@pytest.mark.parametrize("where", ["/", "{runs}", "{above_runs}"])
def test_a_data_root_that_holds_the_runs_root_is_refused_in_the_admin(db, live_settings, where):
    from django.core.exceptions import ValidationError

    from trainhub.pools.models import DataRoot

    runs = Path(live_settings.TRAINHUB_RUNS_DIR)
    with pytest.raises(ValidationError) as info:
        DataRoot(name="all", path=where.format(runs=runs, above_runs=runs.parent)).full_clean()
    assert "path" in info.value.message_dict
    DataRoot(name="fine", path=str(runs.parent / "data")).full_clean()


def test_the_worker_shows_the_sandbox_only_the_places_of_the_specs_paths(user, cpu_pool, tmp_path, live_settings):
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import DataRoot
    from workers import executor

    corpora, models = tmp_path / "corpora", tmp_path / "models"
    for folder in (corpora, models, tmp_path / "other"):
        folder.mkdir()
    (corpora / "corpus.txt").write_text(CORPUS)
    (models / "tok").mkdir()
    for name in ("corpora", "models", "other"):
        DataRoot.objects.create(name=name, path=str(tmp_path / name))
    job = job_submit(owner=user, data=llm_spec(data_path=str(corpora / "corpus.txt"), tokenizer=str(models / "tok")))
    job = Job.objects.get(pk=job.pk)
    request = executor.prepare(job, job.spec_model, executor.run_dir_for(job), config_name="job.yaml",
                               launch_kwargs={}, env_extra={})
    assert request.read_only == (corpora, models)


def test_the_sandbox_binds_a_data_root_read_only_and_another_run_dir_over_the_hidden_runs_root(tmp_path):
    from workers import sandbox

    runs, data = tmp_path / "runs", tmp_path / "data"
    for folder in (runs / "job-1", runs / "job-2", data):
        folder.mkdir(parents=True)
    plan = sandbox.Plan(run_dir=runs / "job-2", cwd=runs / "job-2", project=Path("/srv/trainhub"), env={},
                        read_only=(data, runs / "job-1"), hidden=(runs,))
    joined = " ".join(sandbox.argv(plan))
    assert f"--ro-bind-try {data} {data}" in joined
    hide = joined.index(f"--tmpfs {runs}")
    assert joined.index(f"--ro-bind-try {data} ") < hide < joined.index(f"--ro-bind-try {runs}/job-1 {runs}/job-1")
    assert joined.index(f"--ro-bind-try {runs}/job-1 ") < joined.index(f"--bind {runs}/job-2 {runs}/job-2")


@pytest.mark.slow
def test_a_forged_spec_past_the_submit_check_fails_on_the_worker_before_anything_reads_the_path(
        start_worker, user, bobs_run_dir):
    """The row is written straight to the database (as a bug or a hostile API path could); the pool is
    unsandboxed, so the worker's own check is the only thing between the job and bob's corpus."""
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.jobs.rundir import run_dir
    from trainhub.jobs.services import job_enqueue
    from trainhub.pools.models import WorkerPool

    pool = WorkerPool.objects.create(name="open", queue="open", sandbox="off")
    spec = {**llm_spec(data_path=str(bobs_run_dir / "corpus.txt")), "name": "forged", "pool": "open"}
    job = Job.submit(owner=user, name="forged", mode="llm", spec=spec, pool=pool)
    job_enqueue(job)
    start_worker("open")
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the forged job to end")
    lines = [line.text for line in logs.read_lines(job.pk, limit=1000)]
    assert done.status == "failed", lines
    assert "data.path" in done.error and "outside the places your jobs may read" in done.error, done.error
    assert not any("starting" in t for t in lines), lines  # no process was started
    assert not (run_dir(job.pk) / "job.yaml").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (apt-get install bubblewrap)")
def test_a_sandboxed_llm_job_trains_on_the_data_root_its_spec_names(start_worker, user, user_client, tmp_path):
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.pools.models import DataRoot, WorkerPool

    corpora = tmp_path / "corpora"
    corpora.mkdir()
    (corpora / "corpus.txt").write_text(CORPUS)
    DataRoot.objects.create(name="corpora", path=str(corpora))
    WorkerPool.objects.create(name="boxed", queue="boxed", sandbox="required")
    start_worker("boxed")
    response = submit(user_client, {**llm_spec(data_path=str(corpora / "corpus.txt")), "pool": "boxed"})
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    done = wait_for(lambda: Job.objects.filter(pk=job_id, status__in=["succeeded", "failed"]).first(),
                    timeout=240, message="the sandboxed LLM job to end")
    lines = [line.text for line in logs.read_lines(job_id, limit=2000)]
    assert done.status == "succeeded", (done.error, lines[-20:])
    assert not any("running unsandboxed" in t for t in lines)


def test_the_inline_check_confirms_neither_other_users_checkpoints_nor_their_files(user_client, bobs_run_dir):
    """``?validate=1`` answers the same for another user's existing checkpoint or file as for a missing one."""
    from tests.api.test_new_job_form import FORM

    (bobs_run_dir / "checkpoints" / "step-4").mkdir(parents=True)
    job_id = int(bobs_run_dir.name.removeprefix("job-"))

    def answer(**spec) -> str:
        import json

        response = user_client.post("/jobs/new?validate=1", {**FORM, "extra": json.dumps(spec)})
        assert response.status_code == 200
        return response.content.decode().replace(str(job_id + 1000), str(job_id))

    existing = answer(checkpoint={"start_from": f"job-{job_id}/checkpoints/step-4"})
    missing = answer(checkpoint={"start_from": f"job-{job_id + 1000}/checkpoints/step-4"})
    assert "no checkpoint" in existing and existing == missing

    def refusal(name: str) -> str:
        response = submit(user_client, llm_spec(data_path=str(bobs_run_dir / name)))
        return response.json()["errors"]["data.path"].replace(name, "FILE")

    assert refusal("corpus.txt") == refusal("missing.txt")  # bob's file exists; the answer does not say so
