"""Hostile and random specs: always a field-level message, never a 500 or a crash."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainhub.jobs.models import Job
from workers.runner.config import SpecError, load_text, parse_spec

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=30))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                      max_leaves=20)
known_keys = st.sampled_from(["name", "mode", "pool", "resources", "data", "model", "train", "checkpoint",
                              "deepspeed", "llm", "script", "max_restarts", "timeout_minutes", "common_args",
                              "train_args", "priority", "strategy"])
specs = st.dictionaries(st.one_of(known_keys, st.text(max_size=10)), values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(specs)
def test_any_mapping_either_validates_or_names_the_offending_fields(data):
    try:
        parse_spec(data)
    except SpecError as exc:
        assert exc.errors and all(isinstance(k, str) and isinstance(v, str) and v for k, v in exc.errors.items())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_either_parses_or_is_refused_with_a_message(text):
    try:
        load_text(text)
    except SpecError as exc:
        assert exc.errors.get("spec")


def test_yaml_tags_that_build_python_objects_are_refused():
    with pytest.raises(SpecError):
        load_text("name: !!python/object/apply:os.system ['echo pwned']\n")


def test_an_oversize_spec_is_refused_before_parsing():
    with pytest.raises(SpecError) as info:
        load_text("name: " + "x" * 300_000)
    assert "KiB" in info.value.errors["spec"]


@pytest.fixture
def api(user_client, cpu_pool, live_settings):
    return user_client


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=specs)
def test_the_api_answers_random_specs_with_201_or_422_never_500(api, body):
    response = api.post("/api/jobs", json.dumps(body, default=str), content_type="application/json")
    assert response.status_code in (201, 422), response.content
    if response.status_code == 422:
        assert response.json()["errors"] or response.json()["detail"]


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"null", b"\xff\xfe", b'"a string"'])
def test_the_api_refuses_malformed_bodies_without_a_500(api, raw):
    response = api.post("/api/jobs", raw, content_type="application/json")
    assert 400 <= response.status_code < 500
    assert not Job.objects.exists()


def test_an_oversize_request_body_is_refused(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = api.post("/api/jobs", json.dumps({"name": "x" * 20_000}), content_type="application/json")
    assert response.status_code in (400, 413, 422)
    assert not Job.objects.exists()


@pytest.mark.parametrize("arg", ["; rm -rf /", "$(touch /tmp/pwned)", "`id`", "a\nb", "--config=/etc/passwd"])
def test_shell_metacharacters_in_spec_values_stay_inert_argv_items(arg, tmp_path):
    from workers.runner import launch

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").write_text("print('hi')\n")
    spec = parse_spec({"mode": "script", "name": arg.replace("\n", " "),
                       "script": {"workspace": "ws", "entry": "train.py", "args": [arg]}})
    argv = launch.argv(spec, tmp_path / "job.yaml", tmp_path, workspace_dir=workspace)
    assert argv[-1] == arg and isinstance(argv, list)
