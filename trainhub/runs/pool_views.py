"""Staff pool pages: /pools/ (all pools) and /pools/<name> (workers, GPUs, queue, running jobs, actions).

They live with runs, not pools: they show what runs on the inventory (queues, GPU leases)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_POST

from trainhub.jobs.models import Status
from trainhub.jobs.services import pool_cancel_jobs
from trainhub.pools.models import WorkerPool
from trainhub.pools.services import pool_history, pool_set_state
from trainhub.pools.slurm_nodes import pool_nodes
from trainhub.runs.models import GpuLease, SlurmRun

RUNNING = [Status.RUNNING, Status.CANCELLING]


def _pools():
    return WorkerPool.objects.annotate(
        queued=Count("jobs", filter=Q(jobs__status=Status.QUEUED), distinct=True),
        running=Count("jobs", filter=Q(jobs__status__in=RUNNING), distinct=True)
    ).order_by("name")  # explicit: Meta.ordering does not apply to a GROUP BY query


@staff_member_required
def pool_list(request: HttpRequest) -> HttpResponse:
    pools = list(_pools().prefetch_related("workers"))
    for pool in pools:
        pool.online_count = sum(w.online for w in pool.workers.all())
    return render(request, "pools/list.html", {"pools": pools})


@staff_member_required
def pool_detail(request: HttpRequest, name: str) -> HttpResponse:
    pool = get_object_or_404(_pools(), name=name)
    leases = {(l.worker_id, l.index): l for l in GpuLease.objects.filter(worker__pool=pool).select_related("job")}
    workers = []
    for worker in pool.workers.all():
        gpus = [{"index": i, "lease": leases.get((worker.pk, i))} for i in range(worker.gpu_count)]
        workers.append({"worker": worker, "gpus": gpus,
                        "running": sum(1 for j in pool.jobs.filter(worker=worker, status__in=RUNNING))})
    context = {
        "pool": pool, "workers": workers, "states": WorkerPool.State,
        "running_jobs": pool.jobs.filter(status__in=RUNNING).select_related("owner", "worker").order_by("id"),
        "queued_jobs": pool.jobs.filter(status=Status.QUEUED).select_related("owner")
                           .order_by("-priority", "id")[:50],
        "history": pool_history(pool),
    }
    if pool.kind == WorkerPool.Kind.SLURM:
        context["slurm_nodes"], context["slurm_error"] = _slurm_nodes(pool)
    return render(request, "pools/detail.html#live" if request.htmx else "pools/detail.html", context)


def _slurm_nodes(pool: WorkerPool):
    """The partition's nodes, each with the TrainHub jobs Slurm runs on it now."""
    nodes, error = pool_nodes(pool)
    by_name = {node.name: node for node in nodes}
    running = SlurmRun.objects.filter(job__pool=pool, job__status__in=RUNNING).exclude(nodelist="").select_related("job")
    for run in running.order_by("job_id"):
        if run.attempt == run.job.attempt:
            for name in run.nodelist.split(","):
                if name in by_name:
                    by_name[name].jobs.append(run.job)
    return nodes, error


@require_POST
@staff_member_required
@permission_required("pools.change_workerpool", raise_exception=True)
def pool_state(request: HttpRequest, name: str) -> HttpResponse:
    pool = get_object_or_404(WorkerPool, name=name)
    state = request.POST.get("state", "")
    if state not in WorkerPool.State.values:
        messages.error(request, f"unknown state {state!r}; use enabled, draining or disabled")
    elif pool_set_state(pool, state, actor=request.user):
        messages.success(request, f"pool {pool.name} is now {state}")
    return redirect("pool_detail", name=pool.name)


@require_POST
@staff_member_required
@permission_required(["pools.change_workerpool", "jobs.change_job"], raise_exception=True)
def pool_cancel(request: HttpRequest, name: str) -> HttpResponse:
    pool = get_object_or_404(WorkerPool, name=name)
    count = pool_cancel_jobs(pool, actor=request.user)
    messages.success(request, f"{count} job(s) of pool {pool.name} cancelled")
    return redirect("pool_detail", name=pool.name)


urlpatterns = [
    path("", pool_list, name="pool_list"),
    path("<str:name>", pool_detail, name="pool_detail"),
    path("<str:name>/state", pool_state, name="pool_state"),
    path("<str:name>/cancel", pool_cancel, name="pool_cancel"),
]
