"""``load_arguments``: the spec plus where this process runs (FedML's ``args``)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.runner.config import JobSpec, load_file, parse_spec
from workers.runner.errors import SpecError


@dataclass
class Arguments:
    """One process's view of a job: the validated spec, its run directory and its rank.

    Spec sections read through: ``args.train.lr`` is ``args.spec.train.lr``.
    """

    spec: JobSpec
    run_dir: Path
    config_path: Path | None = None
    workspace_dir: Path | None = None
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    #: filled by ``runner.data.load``; ``runner.model.create`` reuses it
    workload: Any = field(default=None, repr=False)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "spec":
            raise AttributeError(name)
        return getattr(self.spec, name)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def load_arguments(config: str | Path | dict | JobSpec, run_dir: str | Path | None = None,
                   workspace_dir: str | Path | None = None) -> Arguments:
    """Validate a spec (a file path, a mapping or a ``JobSpec``) and read this process's rank.

    Raises ``SpecError`` for an invalid spec. ``run_dir`` defaults to ``runs/<spec.name>``.
    """
    path = None
    if isinstance(config, JobSpec):
        spec = config
    elif isinstance(config, dict):
        spec = parse_spec(config)
    else:
        path = Path(config)
        spec = load_file(path)
    _check_world_size(spec, os.environ.get("WORLD_SIZE"))
    return Arguments(
        spec=spec,
        run_dir=Path(run_dir) if run_dir else Path("runs") / spec.name,
        config_path=path,
        workspace_dir=Path(workspace_dir) if workspace_dir else None,
        rank=int(os.environ.get("RANK", "0")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
    )


def _check_world_size(spec: JobSpec, started: str | None) -> None:
    """Under torchrun, the ranks it started must be the ranks the spec asks for: a centralized spec
    under ``--nproc-per-node 2`` would otherwise train twice, side by side, into one run directory.
    One rank is always allowed: a ddp/deepspeed spec run without a launcher is one rank by design
    (``lifecycle._single_process_rendezvous``, which also leaves ``WORLD_SIZE=1`` in this process)."""
    if started is None or spec.workload == "script" or int(started) in (1, spec.world_size):
        return
    if spec.world_size == 1:
        fix = (f"run it with `python -m workers.runner` (no torchrun), or give it mode: ddp and "
               f"resources.procs_per_node: {started}")
    else:
        fix = f"start torchrun with --nnodes {spec.resources.nodes} --nproc-per-node {spec.resources.procs_per_node}"
    raise SpecError({"resources": f"this spec runs {spec.world_size} process(es) (mode {spec.mode}, nodes × "
                                  f"procs_per_node) but {started} were started (WORLD_SIZE); {fix}"})
