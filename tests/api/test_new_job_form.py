"""The new-job page: fields per mode (htmx), inline validation, YAML tab round trip, FedML upload,
clone, templates, and the "run locally" hint."""
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from trainhub.jobs.models import Job, JobTemplate

pytestmark = pytest.mark.django_db

FORM = {"name": "digits-mlp", "mode": "centralized", "pool": "cpu", "dataset": "digits", "model": "mlp",
        "epochs": 2, "lr": 0.003, "optimizer": "adamw", "batch_size": 64, "seed": 0, "gpus_per_node": 0,
        "priority": 0, "checkpoint_every": 0, "max_restarts": 0, "timeout_minutes": 120, "extra": "", "spec_yaml": ""}


@pytest.fixture(autouse=True)
def no_enqueue(monkeypatch):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)


def test_the_form_submits_a_centralized_job(user_client, cpu_pool):
    response = user_client.post("/jobs/new", FORM)
    assert response.status_code == 302, response.content[-2000:]
    job = Job.objects.get()
    assert job.spec["train"]["epochs"] == 2 and job.spec["resources"]["procs_per_node"] == 1


def test_picking_a_mode_swaps_in_its_fields_with_defaults(user_client, cpu_pool):
    html = user_client.get("/jobs/new?fragment=mode-fields&mode=deepspeed", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="mode-fields"' in html and 'name="zero_stage"' in html and 'name="procs_per_node"' in html
    assert 'value="2"' in html and "<html" not in html
    llm = user_client.get("/jobs/new?fragment=mode-fields&mode=llm").content.decode()
    assert 'name="seq_len"' in llm and 'name="lora_r"' in llm and 'name="zero_stage"' not in llm
    script = user_client.get("/jobs/new?fragment=mode-fields&mode=script").content.decode()
    assert 'name="workspace"' in script and 'name="dataset"' not in script


def test_each_mode_submits_from_its_typed_fields(user_client, cpu_pool):
    ddp = {**FORM, "mode": "ddp", "nodes": 1, "procs_per_node": 2}
    assert user_client.post("/jobs/new", ddp).status_code == 302
    ds = {**FORM, "mode": "deepspeed", "nodes": 1, "procs_per_node": 2, "zero_stage": 3, "precision": "fp32"}
    assert user_client.post("/jobs/new", ds).status_code == 302
    llm = {**FORM, "mode": "llm", "name": "tiny", "nodes": 1, "procs_per_node": 1, "arch": "llama", "size": "tiny",
           "seq_len": 64, "tokenizer": "byte", "lora_r": 4, "strategy": ""}
    assert user_client.post("/jobs/new", llm).status_code == 302
    specs = {j.mode: j.spec for j in Job.objects.all()}
    assert specs["ddp"]["resources"]["procs_per_node"] == 2
    assert specs["deepspeed"]["deepspeed"]["zero_stage"] == 3
    assert specs["llm"]["llm"]["seq_len"] == 64 and specs["llm"]["llm"]["lora"]["r"] == 4


def test_inline_validation_names_the_bad_fields_out_of_band(user_client, cpu_pool):
    html = user_client.post("/jobs/new?validate=1", {**FORM, "lr": -1, "epochs": "many"}).content.decode()
    assert 'id="err-lr" class="field-error" role="alert" hx-swap-oob="true">' in html
    assert "must be a whole number" in html  # epochs: typed text is named, not "This field is required."
    ok = user_client.post("/jobs/new?validate=1", FORM).content.decode()
    assert 'id="err-lr" class="field-error" role="alert" hx-swap-oob="true"></span>' in ok
    assert "python -m workers.runner --config job.yaml" in ok and "trainhub submit job.yaml" in ok
    assert Job.objects.count() == 0


def test_the_spec_model_refuses_combinations_by_field(user_client, cpu_pool):
    response = user_client.post("/jobs/new", {**FORM, "model": "cnn", "dataset": "iris"})
    assert response.status_code == 422
    assert b"cnn needs image-shaped data" in response.content


def test_the_yaml_tab_round_trips_with_the_form(user_client, cpu_pool):
    to_yaml = user_client.post("/jobs/new", {**FORM, "action": "to_yaml", "extra": '{"data": {"val_fraction": 0.1}}'})
    text = to_yaml.context["form"].initial["spec_yaml"]
    assert "val_fraction: 0.1" in text and "lr: 0.003" in text and to_yaml.context["tab"] == "yaml"
    edited = text.replace("epochs: 2", "epochs: 7")
    back = user_client.post("/jobs/new", {"action": "to_form", "spec_yaml": edited})
    initial = back.context["form"].initial
    assert back.context["tab"] == "form" and initial["epochs"] == 7 and '"val_fraction": 0.1' in initial["extra"]
    # submitting the form as shown keeps the key the form has no field for
    assert user_client.post("/jobs/new", {**FORM, **{k: v for k, v in initial.items() if v is not None},
                                          "spec_yaml": ""}).status_code == 302
    assert Job.objects.get().spec["data"]["val_fraction"] == 0.1


def test_a_pasted_fedml_config_is_translated(user_client, cpu_pool):
    fedml = ("common_args: {training_type: simulation, random_seed: 3}\n"
             "data_args: {dataset: digits}\nmodel_args: {model: mlp}\n"
             "train_args: {epochs: 1, batch_size: 32, learning_rate: 0.01}\n")
    response = user_client.post("/jobs/new", {"spec_yaml": fedml, "action": "submit"})
    assert response.status_code == 302, response.content[-3000:]
    spec = Job.objects.get().spec
    assert spec["train"]["seed"] == 3 and spec["data"]["batch_size"] == 32


def test_an_uploaded_fedml_config_with_an_unsupported_key_is_refused_by_name(user_client, cpu_pool):
    upload = SimpleUploadedFile("fedml_config.yaml", b"common_args: {training_type: cross_silo}\n")
    response = user_client.post("/jobs/new", {"spec_file": upload, "action": "submit"})
    assert response.status_code == 422 and b"training_type" in response.content
    assert Job.objects.count() == 0


def test_clone_prefills_any_mode_in_the_typed_fields(user_client, cpu_pool, user):
    source = Job.objects.create(owner=user, name="big", mode="ddp", pool=cpu_pool, spec={
        "name": "big", "mode": "ddp", "pool": "cpu", "resources": {"procs_per_node": 2}, "train": {"epochs": 9}})
    form = user_client.get(f"/jobs/new?clone={source.pk}").context["form"]
    assert form.mode == "ddp" and form.initial["name"] == "big-copy" and form.initial["procs_per_node"] == 2
    assert form.initial["epochs"] == 9


def test_save_as_template_then_start_from_it(user_client, cpu_pool, user):
    saved = user_client.post("/jobs/new", {**FORM, "action": "save_template", "template_name": "baseline"})
    assert saved.status_code == 302 and saved["Location"].startswith("/templates/")
    template = JobTemplate.objects.get(owner=user)
    assert template.name == "baseline" and template.spec["train"]["lr"] == 0.003
    assert b"baseline" in user_client.get("/templates/").content
    form = user_client.get(f"/jobs/new?template={template.pk}").context["form"]
    assert form.initial["lr"] == 0.003
    assert user_client.post(f"/templates/{template.pk}/delete").status_code == 302
    assert not JobTemplate.objects.exists()


def test_someone_elses_job_cannot_be_cloned(user_client, cpu_pool, django_user_model):
    bob = django_user_model.objects.create_user("bob")
    job = Job.objects.create(owner=bob, name="b", mode="centralized", spec={"name": "b"}, pool=cpu_pool)
    assert user_client.get(f"/jobs/new?clone={job.pk}").status_code == 404


def test_resources_are_checked_against_the_chosen_pool_as_you_type(user_client, cpu_pool):
    html = user_client.post("/jobs/new?validate=1", {**FORM, "gpus_per_node": 1}).content.decode()
    assert 'id="err-gpus_per_node"' in html and "has no GPUs" in html


def test_broken_yaml_says_where_and_stays_on_the_yaml_tab(user_client, cpu_pool):
    for action in ("to_yaml", "submit", "to_form"):
        response = user_client.post("/jobs/new", {"action": action, "spec_yaml": "name: [oops\n"})
        assert response.status_code == 422, action
        assert b"not valid YAML or JSON at line" in response.content and response.context["tab"] == "yaml"


def test_a_mode_switch_renames_an_untouched_default_name_only(user_client, cpu_pool):
    fresh = user_client.get("/jobs/new?fragment=mode-fields&mode=llm&name=digits-mlp").content.decode()
    assert 'value="tiny-llm"' in fresh and 'hx-swap-oob="true"' in fresh
    typed = user_client.get("/jobs/new?fragment=mode-fields&mode=llm&name=my-own-run").content.decode()
    assert 'id="id_name"' not in typed


def test_the_forms_choices_come_from_the_spec_model_custom_size_included(user_client, cpu_pool):
    from workers.runner.config import LLM, Script

    llm = user_client.get("/jobs/new?fragment=mode-fields&mode=llm").content.decode()
    for size in LLM.model_fields["size"].annotation.__args__:
        assert f'<option value="{size}"' in llm, size
    script = user_client.get("/jobs/new?fragment=mode-fields&mode=script").content.decode()
    assert all(f'<option value="{v}"' in script for v in Script.model_fields["launcher"].annotation.__args__)


def test_a_custom_size_without_its_shape_is_refused_on_the_size_field(user_client, cpu_pool):
    llm = {**FORM, "mode": "llm", "name": "tiny", "nodes": 1, "procs_per_node": 1, "arch": "llama", "size": "custom",
           "seq_len": 64, "tokenizer": "byte", "lora_r": 0, "strategy": ""}
    response = user_client.post("/jobs/new", llm)
    assert response.status_code == 422 and "custom needs d_model" in " ".join(response.context["form"].errors["size"])


def test_a_yaml_spec_with_workload_and_strategy_opens_in_the_form_as_its_mode(user_client, cpu_pool):
    yaml = "name: spread\nworkload: classify\nstrategy: ddp\nresources: {procs_per_node: 2}\n"
    form = user_client.post("/jobs/new", {"action": "to_form", "spec_yaml": yaml}).context["form"]
    assert form.mode == "ddp" and form.initial["procs_per_node"] == 2 and not form.initial["extra"]
