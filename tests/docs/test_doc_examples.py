"""Every example in README.md and docs/*.md runs as written, against a real stack.

The convention, in the markdown: an HTML comment on the line before a fence says how it runs —
``<!-- example: skip REASON -->`` for one that cannot run here (another host, production),
``<!-- example: needs WHAT -->`` for a spec that needs GPUs, a cluster or your data (it is then
only checked against the spec model), ``run`` for a spec that must also succeed, ``file NAME``
to save it for the shell examples (``job.yaml``), ``fragment`` for a section of a spec,
``shape NAME`` for a JSON document the server sends. Without a marker a ``sh``/``bash`` fence is
run with bash (no venv on PATH, as in a new terminal) against a live server and worker, and a
``yaml``/``json`` fence is submitted and must be accepted. The full table is in tests/docs/examples.py.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import time

import httpx
import pytest
import yaml

from tests.asgi_server import WebServer
from tests.conftest import ROOT, wait_for
from tests.docs.examples import Example, collect, problems
from trainhub.api.models import ApiToken
from workers.runner.config import SpecError, parse_spec

EXAMPLES = collect()
# TRAINHUB_DOC_EXAMPLES=docs/CLI.md,README.md runs only those files' examples (while writing a doc)
ONLY = [p.strip() for p in os.environ.get("TRAINHUB_DOC_EXAMPLES", "").split(",") if p.strip()]
DOC_URL = "http://127.0.0.1:8000"
SHELL_PREAMBLE = """set -eo pipefail
curl() { command curl --fail-with-body --silent --show-error --max-time 120 "$@"; echo; }
"""
FINAL = ("succeeded", "failed", "cancelled")


def test_every_example_is_marked_as_the_convention_says_and_names_the_venv_programs():
    assert len(EXAMPLES) > 20, "the docs' examples were not found"
    wrong = [f"{e.where}: {p}" for e in EXAMPLES for p in problems(e)]
    assert not wrong, "\n".join(wrong)


def test_a_broken_example_is_caught_by_the_checks():
    """The checks themselves can fail: a bare python, an unknown marker."""
    bad = Example(ROOT / "README.md", 1, "sh", "python -m workers.runner --config job.yaml\n", {"spin": ""})
    assert [p.split(" (")[0].split(";")[0] for p in problems(bad)] == [
        "unknown marker 'spin'", "line 2: bare 'python' fails outside the venv"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, reset_sequences=True)  # the docs' `/api/jobs/1/...` is the first job
def test_every_runnable_example_in_the_docs_works_as_written(live_settings, start_worker, cpu_pool, tmp_path,
                                                              django_user_model):
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll would bury the report
    admin = django_user_model.objects.create_superuser("admin", "admin@localhost", "docs-admin-password")
    token = ApiToken.issue(admin, "docs")[1]
    web = WebServer(live_settings, tmp_path / "web.log").start()
    cpu_pool.slots_per_worker = 2  # the README's `trainhub logs -f 1` and `submit --follow` overlap
    cpu_pool.save(update_fields=["slots_per_worker"])
    worker = start_worker("cpu", slots=2)
    work = mirror_checkout(tmp_path / "work")
    env = shell_env(live_settings, token, tmp_path, work)
    api = httpx.Client(base_url=web.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    failures: list[str] = []
    timings: list[str] = []
    must_succeed: dict[int, str] = {}
    try:
        for example in EXAMPLES:
            if "file" in example.markers:
                (work / example.markers["file"]).write_text(example.text)
        for example in EXAMPLES:
            if "skip" in example.markers or (ONLY and example.where.split(":")[0] not in ONLY):
                continue
            started = time.monotonic()
            try:
                if example.kind == "shell":
                    run_shell(example, work, env, web.url)
                elif "shape" in example.markers:
                    pass  # checked below, once a job has finished
                else:
                    job_id = submit(example, api)
                    if job_id is not None and "run" in example.markers:
                        must_succeed[job_id] = example.where
                    elif job_id is not None:  # accepted is what it shows; the worker's time goes to `run` ones
                        api.post(f"/api/jobs/{job_id}/cancel")
            except AssertionError as exc:
                failures.append(f"{example.where} ({example.language}): {exc}")
            timings.append(f"{example.where} {time.monotonic() - started:.1f}s")
        print("time per example:", ", ".join(timings))
        for job_id, where in must_succeed.items():
            job = wait_for(lambda: (j := api.get(f"/api/jobs/{job_id}").json())["status"] in FINAL and j,
                           timeout=300, message=f"job {job_id} of {where} to finish")
            if job["status"] != "succeeded":
                failures.append(f"{where}: job {job_id} {job['status']}: {job.get('error')}")
        for example in (e for e in EXAMPLES if "shape" in e.markers and "skip" not in e.markers
                        and (not ONLY or e.where.split(":")[0] in ONLY)):
            try:
                check_shape(example, api, admin, next(iter(must_succeed), 1))
            except AssertionError as exc:
                failures.append(f"{example.where} (shape {example.markers['shape']}): {exc}")
    finally:
        web.stop()
    assert not failures, ("examples that do not work as written:\n\n" + "\n\n".join(failures)
                          + f"\n\nworker log tail:\n{worker.output()[-1500:]}")


def mirror_checkout(work):
    """A directory that looks like the checkout (links to it), so examples can write job.yaml and runs/ there."""
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "var", "runs", ".pytest_cache"):
            (work / entry.name).symlink_to(entry)
    return work


def shell_env(settings, token, tmp_path, work) -> dict:
    venv_bin = str(ROOT / ".venv" / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and os.path.realpath(p) != os.path.realpath(venv_bin) and "/.venv/" not in p + "/"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "TRAINHUB_URL", "TRAINHUB_TOKEN")}
    from tests.conftest import database_url

    env.update(PATH=os.pathsep.join(path), TOKEN=token, DATABASE_URL=database_url(), REDIS_URL=settings.REDIS_URL,
               TRAINHUB_RUNS_DIR=str(settings.TRAINHUB_RUNS_DIR), TRAINHUB_CONFIG=str(tmp_path / "cli.json"),
               PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="200", HOME=str(tmp_path))
    return env


def run_shell(example: Example, work, env, url: str) -> None:
    script = SHELL_PREAMBLE + example.text.replace(DOC_URL, url)
    started = time.monotonic()
    try:
        done = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"still running after 300 s: {(exc.stdout or b'')[-800:]!r}") from None
    said = "\n".join(line for line in done.stderr.splitlines()  # what a user would read first
                     if line.startswith(("spec error", "failed:", "error", "Error", "curl:", "bash:")))
    assert done.returncode == 0, (f"exit code {done.returncode} after {time.monotonic() - started:.0f} s\n"
                                  f"--- errors\n{said}\n"
                                  f"--- stdout (tail)\n{done.stdout[-1200:]}\n--- stderr (tail)\n{done.stderr[-1200:]}")


def spec_of(example: Example) -> dict:
    data = json.loads(example.text) if example.language == "json" else yaml.safe_load(example.text)
    assert isinstance(data, dict), "not a mapping"
    if "fragment" in example.markers:
        data = {"name": "docs-fragment", **data}
    return data


def submit(example: Example, api: httpx.Client) -> int | None:
    spec = spec_of(example)
    if "needs" in example.markers:
        try:
            parse_spec(spec)
        except SpecError as exc:
            raise AssertionError(f"refused by the spec model: {exc}") from None
        return None
    response = api.post("/api/jobs", json=spec)
    assert response.status_code == 201, f"POST /api/jobs answered {response.status_code}: {response.text[:800]}"
    return response.json()["id"]


def check_shape(example: Example, api: httpx.Client, admin, job_id: int) -> None:
    documented = json.loads(example.text)
    shape = example.markers["shape"]
    if shape == "api-error":  # the documented refusal, asked for again: a zero lr and a misspelt key
        body: dict = {}
        for dotted in documented["errors"]:
            section, key = dotted.split(".", 1)
            body.setdefault(section, {})[key] = 0 if key == "lr" else 1
        real = api.post("/api/jobs", json=body).json()
        assert real == documented, f"the server answers {real}"
        return
    if shape == "metrics.json":
        from django.test import Client

        client = Client()
        client.force_login(admin)
        real = client.get(f"/jobs/{job_id}/metrics.json").json()
    else:
        from trainhub.jobs.models import Job
        from trainhub.notify.services import payload

        # the body a receiver gets: the payload fixed at the final status plus the outbox's idempotency key
        # (trainhub/notify/outbox.py, ``delivery_id``)
        real = {**payload(Job.objects.get(pk=job_id)), "delivery_id": 0}
    assert_same_keys(documented, real, "")


def assert_same_keys(documented, real, where: str) -> None:
    """Every key the doc shows is in the real document (metric names included), nested alike."""
    missing = sorted(set(documented) - set(real))
    assert not missing, f"{where or 'top level'}: the real document has no {missing}; it has {sorted(real)}"
    for key, value in documented.items():
        if isinstance(value, dict) and isinstance(real[key], dict):
            assert_same_keys(value, real[key], f"{where}.{key}".lstrip("."))
        else:
            assert type(value) is type(real[key]) or real[key] is None or value is None or (
                isinstance(value, (int, float)) and isinstance(real[key], (int, float))), \
                f"{where}.{key}: documented as {type(value).__name__}, is {type(real[key]).__name__}"
