"""The job list page: filters, search, keyset pagination that keeps them, bulk cancel."""
import pytest

from trainhub.jobs.models import Job

pytestmark = pytest.mark.django_db


def make(owner, pool, name, mode="centralized", status="queued"):
    return Job.objects.create(owner=owner, name=name, mode=mode, spec={}, pool=pool, status=status)


def names(response):
    return [j.name for j in response.context["jobs"]]


def test_filters_and_search_narrow_the_list(user_client, user, cpu_pool):
    make(user, cpu_pool, "alpha")
    make(user, cpu_pool, "beta-run", mode="ddp", status="succeeded")
    assert names(user_client.get("/?q=beta")) == ["beta-run"]
    assert names(user_client.get("/?mode=ddp")) == ["beta-run"]
    assert names(user_client.get("/?status=queued")) == ["alpha"]
    assert names(user_client.get("/?pool=cpu")) == ["beta-run", "alpha"]
    assert names(user_client.get("/?status=bogus")) == ["beta-run", "alpha"]


def test_htmx_gets_only_the_results_fragment(user_client, user, cpu_pool):
    make(user, cpu_pool, "alpha")
    html = user_client.get("/?q=al", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="job-results").content.decode()
    assert html.lstrip().startswith('<form id="job-results"') and "alpha" in html and "?q=al" in html


def test_pagination_keeps_the_filters(user_client, user, cpu_pool):
    for i in range(55):
        make(user, cpu_pool, f"run-{i}")
    first = user_client.get("/?q=run")
    assert len(first.context["jobs"]) == 50
    assert f'?q=run&amp;before={first.context["next_before"]}' in first.content.decode()
    second = user_client.get(f"/?q=run&before={first.context['next_before']}")
    assert len(second.context["jobs"]) == 5


def test_owner_filter_is_for_staff_only(user_client, user, cpu_pool, django_user_model):
    bob = django_user_model.objects.create_user("bob")
    make(bob, cpu_pool, "bobs")
    make(user, cpu_pool, "mine")
    assert names(user_client.get("/?owner=bob")) == ["mine"]
    user.is_staff = True
    user.save()
    assert names(user_client.get("/?owner=bob")) == ["bobs"]


def test_bulk_cancel_cancels_only_selected_jobs_the_user_may_see(user_client, user, cpu_pool, django_user_model):
    a, b, _ = make(user, cpu_pool, "a"), make(user, cpu_pool, "b"), make(user, cpu_pool, "c")
    theirs = make(django_user_model.objects.create_user("bob"), cpu_pool, "bobs")
    response = user_client.post("/", {"ids": [a.pk, b.pk, theirs.pk], "next": "/?q=a"})
    assert response.status_code == 302 and response["Location"] == "/?q=a"
    status = dict(Job.objects.values_list("name", "status"))
    assert status == {"a": "cancelled", "b": "cancelled", "c": "queued", "bobs": "queued"}
    assert user_client.post("/", {"ids": ["x"], "next": "//evil.example"})["Location"] == "/"


def test_a_page_costs_a_fixed_number_of_queries_however_many_jobs(user_client, user, cpu_pool,
                                                                   django_assert_max_num_queries):
    Job.objects.bulk_create([Job(owner=user, name=f"j{i}", mode="centralized", spec={}, pool=cpu_pool)
                             for i in range(120)])
    with django_assert_max_num_queries(6):
        response = user_client.get("/?q=j&status=queued")
    assert len(response.context["jobs"]) == 50


def test_oldest_first_pages_forward_with_its_own_cursor(user_client, user, cpu_pool):
    jobs = [make(user, cpu_pool, f"run-{i}") for i in range(55)]
    first = user_client.get("/?sort=oldest")
    assert names(first)[:2] == ["run-0", "run-1"] and len(first.context["jobs"]) == 50
    assert f"?sort=oldest&amp;after={jobs[49].pk}" in first.content.decode()
    second = user_client.get(f"/?sort=oldest&after={jobs[49].pk}")
    assert names(second) == [f"run-{i}" for i in range(50, 55)]
