"""The smaller things a newcomer trips over: workspace choices, quiet first check, 404 page,
favicon, time zones, token names and revoking, the admin's read-only status."""
import pytest

from trainhub.api.models import ApiToken
from trainhub.jobs.models import Job
from trainhub.pools.models import Workspace

pytestmark = pytest.mark.django_db


def test_script_mode_offers_the_registered_workspaces_and_its_hint_runs_there(user_client, cpu_pool, tmp_path):
    Workspace.objects.create(name="vision", path=str(tmp_path))
    (tmp_path / "train.py").write_text("print('hi')\n")
    fields = user_client.get("/jobs/new?fragment=mode-fields&mode=script").content.decode()
    assert '<option value="vision">vision</option>' in fields
    form = {"name": "s", "mode": "script", "pool": "cpu", "epochs": 1, "lr": 0.1, "optimizer": "adamw",
            "batch_size": 8, "workspace": "vision", "entry": "train.py", "launcher": "python"}
    checked = user_client.post("/jobs/new?validate=1", form).content.decode()
    assert f"cd {tmp_path} &amp;&amp; " in checked and "/.venv/bin/python train.py" in checked


def test_the_check_on_load_does_not_call_an_untouched_field_required(user_client, cpu_pool):
    form = {"name": "s", "mode": "script", "pool": "cpu", "epochs": 1, "lr": 0.1, "optimizer": "adamw",
            "batch_size": 8, "workspace": "", "entry": "train.py", "launcher": "python"}
    quiet = user_client.post("/jobs/new?validate=1&quiet=1", form).content.decode()
    assert "This field is required" not in quiet
    assert "This field is required" in user_client.post("/jobs/new?validate=1", form).content.decode()


def test_an_unknown_page_is_the_sites_own_404_with_a_way_back(user_client, settings):
    settings.DEBUG = False
    response = user_client.get("/jobs/999999")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'id="not-found"' in html and 'href="/"' in html and "TrainHub" in html


def test_favicon_is_served(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")


def test_times_carry_their_time_zone(user_client, user, cpu_pool):
    Job.submit(owner=user, name="tz", mode="centralized", spec={}, pool=cpu_pool)
    assert " UTC</td>" in user_client.get("/").content.decode()


def test_a_second_live_token_with_the_same_name_is_refused_and_revoke_asks_first(user_client, user):
    assert user_client.post("/tokens/", {"name": "laptop"}).status_code == 201
    again = user_client.post("/tokens/", {"name": "laptop"})
    assert again.status_code == 422 and "already have a token named" in again.content.decode()
    assert ApiToken.objects.filter(user=user).count() == 1
    assert 'data-confirm="Revoke token “laptop”?' in user_client.get("/tokens/").content.decode()


def test_the_admin_cannot_edit_a_jobs_status(client, django_user_model, cpu_pool):
    root = django_user_model.objects.create_superuser("root", password="pw-root-123")
    job = Job.submit(owner=root, name="j", mode="centralized", spec={}, pool=cpu_pool)
    client.force_login(root)
    page = client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    for field in ("status", "exit_code", "error", "step", "finished_at"):
        assert f'name="{field}"' not in page
    client.post(f"/admin/jobs/job/{job.pk}/change/", {"name": "j", "priority": 0, "status": "succeeded"})
    assert Job.objects.get(pk=job.pk).status == "queued"


def test_a_refused_yaml_lists_each_field_on_its_own_line(user_client, cpu_pool):
    text = "name: x\npool: cpu\ntrain: {lr: -1, epocs: 2}\ndata: {batch_size: 0}\n"
    html = user_client.post("/jobs/new", {"spec_yaml": text, "action": "submit"}).content.decode()
    box = html[html.index('id="err-spec_yaml"'):]
    box = box[:box.index("</label>")]
    messages = box.count('<span class="msg">')
    assert messages >= 3 and "train.lr" in box and "train.epocs" in box and "data.batch_size" in box
