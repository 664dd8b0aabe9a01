import pytest

from trainhub.jobs.services import job_submit, spec_validate
from trainhub.pools.models import WorkerPool
from workers.runner.config import SpecError, load_text, parse_spec


def errors_of(data):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return info.value.errors


def test_a_minimal_spec_gets_sensible_defaults():
    spec = parse_spec({"name": "x"})
    assert (spec.mode, spec.pool, spec.data.dataset, spec.model.name) == ("centralized", "cpu", "digits", "mlp")


def test_unknown_keys_are_refused_by_their_path():
    assert errors_of({"train": {"lrr": 0.1}}) == {"train.lrr": "unknown key; remove it or check its spelling"}


def test_wrong_types_name_the_field():
    errors = errors_of({"train": {"epochs": "many"}})
    assert list(errors) == ["train.epochs"] and "integer" in errors["train.epochs"]


def test_out_of_range_values_say_the_limit():
    assert "greater than 0" in errors_of({"train": {"lr": 0}})["train.lr"]


def test_impossible_combinations_say_how_to_fix_them():
    errors = errors_of({"mode": "centralized", "resources": {"procs_per_node": 2}})
    assert "use mode ddp" in errors["resources.procs_per_node"]


def test_unknown_dataset_lists_the_choices():
    assert "digits" in errors_of({"data": {"dataset": "imagenet"}})["data.dataset"]


def test_broken_yaml_points_at_the_line():
    with pytest.raises(SpecError) as info:
        load_text("name: x\ntrain: [1,\n")
    assert "line" in info.value.errors["spec"]


def test_a_yaml_that_is_not_a_mapping_is_refused():
    with pytest.raises(SpecError):
        load_text("- a\n- b\n")


def test_a_billion_laughs_yaml_is_refused():
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f'{c}: &{c} [{",".join(["*" + p] * 9)}]\n' for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(SpecError):
        load_text(bomb)


def test_an_unknown_pool_is_refused_with_the_existing_names(cpu_pool):
    with pytest.raises(SpecError) as info:
        spec_validate({"pool": "tpu"})
    assert info.value.errors == {"pool": "no pool named 'tpu'; choose one of: cpu"}


def test_a_disabled_pool_accepts_no_jobs(cpu_pool, user):
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(enabled=False)
    with pytest.raises(SpecError) as info:
        job_submit(owner=user, data={"name": "x"})
    assert "disabled" in info.value.errors["pool"]


def test_gpus_on_a_cpu_pool_are_refused(cpu_pool):
    with pytest.raises(SpecError) as info:
        spec_validate({"mode": "ddp", "resources": {"procs_per_node": 1, "gpus_per_node": 1}})
    assert "has no GPUs" in info.value.errors["resources.gpus_per_node"]


def test_a_missing_data_path_is_refused_at_submit_time(cpu_pool, user, tmp_path):
    from trainhub.pools.models import DataRoot

    DataRoot.objects.create(name="corpora", path=str(tmp_path))
    with pytest.raises(SpecError) as info:
        job_submit(owner=user, data={"mode": "llm", "data": {"path": str(tmp_path / "nonexistent" / "corpus.txt")},
                                     "llm": {"size": "tiny"}})
    assert "does not exist" in info.value.errors["data.path"]


def test_a_script_entry_missing_from_its_workspace_is_refused_at_submit_time(cpu_pool, user, tmp_path):
    from trainhub.pools.models import Workspace

    Workspace.objects.create(name="vision", path=str(tmp_path))
    with pytest.raises(SpecError) as info:
        job_submit(owner=user, data={"mode": "script", "script": {"workspace": "vision", "entry": "train.py"}})
    assert "not found in the workspace" in info.value.errors["script.entry"]


def test_a_job_submitted_as_workload_and_strategy_is_stored_under_its_mode(cpu_pool, user):
    job = job_submit(owner=user, data={"name": "x", "workload": "classify", "strategy": "ddp",
                                       "resources": {"procs_per_node": 2}})
    assert job.mode == "ddp" and job.spec["mode"] == "ddp" and "workload" not in job.spec
    assert (job.spec_model.workload, job.spec_model.strategy) == ("classify", "ddp")


def test_a_jobs_spec_model_is_parsed_once_and_again_for_a_new_spec(cpu_pool, user):
    job = job_submit(owner=user, data={"name": "x", "train": {"epochs": 4}})
    assert job.spec_model is job.spec_model and job.spec_model.train.epochs == 4
    job.spec = {**job.spec, "train": {"epochs": 5}}
    assert job.spec_model.train.epochs == 5


def test_a_stored_spec_without_its_mode_takes_the_rows_mode(cpu_pool, user):
    from trainhub.jobs.models import Job

    job = Job.objects.create(owner=user, name="x", mode="ddp", pool=cpu_pool, spec={"resources": {"procs_per_node": 2}})
    assert (job.spec_model.strategy, job.spec_model.world_size) == ("ddp", 2)
