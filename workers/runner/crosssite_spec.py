"""The cross-site sections of a job spec: ``sites`` (one pool per site, each with its own
resources) and ``sync`` (how the sites meet: DiLoCo or LocalSGD through torchft).

A cross-site job is one model trained by several replica groups ("sites") that talk over a
slow link only every ``sync.every`` steps. Inside a site the ranks use DDP as in any job.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from workers.runner.errors import SpecError
from workers.runner.sections import Resources, _Section


class Site(_Section):
    pool: str = Field(..., min_length=1, max_length=100, description="the worker pool this site runs on")
    nodes: int = Field(1, ge=1, le=64, description="machines of this site")
    procs_per_node: int = Field(1, ge=1, le=64, description="processes (ranks) per machine of this site")
    gpus_per_node: int = Field(0, ge=0, le=16, description="GPUs leased per machine of this site")

    @property
    def resources(self) -> Resources:
        return Resources(nodes=self.nodes, procs_per_node=self.procs_per_node, gpus_per_node=self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node


class Sync(_Section):
    algorithm: Literal["diloco", "localsgd"] = Field(
        "diloco", description="diloco: outer Nesterov step on the averaged pseudo-gradient; localsgd: average weights")
    every: int = Field(100, ge=1, le=1_000_000, description="inner steps between two syncs (H)")
    outer_lr: float = Field(0.7, gt=0.0, le=10.0, description="diloco only: the outer SGD learning rate")
    outer_momentum: float = Field(0.9, ge=0.0, lt=1.0, description="diloco only: the outer Nesterov momentum")
    min_sites: int = Field(1, ge=1, le=64, description="sites a sync needs; fewer and the sync waits")
    timeout_seconds: int = Field(60, ge=5, le=24 * 3600,
                                 description="a sync (or a peer's heartbeat) slower than this counts as failed")


def check(spec) -> dict[str, str]:
    """What is wrong with the cross-site parts of ``spec`` (field path -> how to fix it)."""
    sites, sync = spec.sites, spec.sync
    if sites is None and sync is None:
        return {}
    if sites is None:
        return {"sites": "sync needs sites: a list of {pool, nodes, procs_per_node}, one per site, "
                         "or remove sync for a job on one pool"}
    if sync is None:
        return {"sync": "a job with sites needs sync: {algorithm: diloco or localsgd, every: N}"}
    errors: dict[str, str] = {}
    if len(sites) < 2:
        errors["sites"] = "a cross-site job needs at least two sites; for one pool use pool and resources instead"
    seen: dict[str, int] = {}
    for i, site in enumerate(sites):
        if site.pool in seen:
            errors[f"sites.{i}.pool"] = (f"pool {site.pool} already holds site {seen[site.pool]}; give each site "
                                         "its own pool (or raise that site's nodes)")
        seen.setdefault(site.pool, i)
        if site.world_size != sites[0].world_size:
            errors[f"sites.{i}.procs_per_node"] = (
                f"every site needs the same number of ranks (torchft pairs rank r of each site): site 0 has "
                f"{sites[0].world_size}, this one {site.world_size}; make nodes × procs_per_node equal")
    if "pool" in spec.model_fields_set and spec.pool not in seen:
        errors["pool"] = "a cross-site job runs on its sites' pools; remove pool"
    if "resources" in spec.model_fields_set and spec.resources not in [s.resources for s in sites]:
        errors["resources"] = "a cross-site job takes its resources from each site; remove resources"
    if sync.algorithm == "localsgd":
        for key in ("outer_lr", "outer_momentum"):
            if getattr(sync, key) != Sync.model_fields[key].default:  # the defaults are written back, harmless
                errors[f"sync.{key}"] = "localsgd averages the weights and has no outer optimizer; remove it or use diloco"
    if sync.min_sites > len(sites):
        errors["sync.min_sites"] = f"more than the {len(sites)} sites the job has; lower it"
    if spec.workload == "script":
        errors["workload"] = "cross-site sync wraps the runner's own workloads (classify, llm); a script cannot use sites"
    elif spec.strategy == "deepspeed":
        errors["strategy"] = "inside a site the ranks use ddp (or single); deepspeed cannot be combined with sites"
    steps = spec.train.max_steps
    if not steps or steps % sync.every:
        errors["train.max_steps"] = (f"cross-site training ends on a sync: set train.max_steps to a multiple of "
                                     f"sync.every ({sync.every}), e.g. {sync.every * max(1, (steps or 0) // sync.every or 5)}")
    return errors


def for_site(spec, index: int):
    """``spec`` as site ``index`` runs it: that site's pool and resources (the rest unchanged)."""
    if spec.sites is None or not 0 <= index < len(spec.sites):
        raise SpecError({"sites": f"no site {index} in this spec"})
    site = spec.sites[index]
    return spec.model_copy(update={"pool": site.pool, "resources": site.resources})
