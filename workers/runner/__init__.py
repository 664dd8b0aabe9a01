"""The shared runner, shaped like FedML's training API::

    from workers import runner

    args = runner.load_arguments("job.yaml", run_dir="runs/demo")
    runner.init(args)                      # seed, process group (when RANK is set), run dir
    device = runner.device.get_device(args)
    dataset = runner.data.load(args)
    model = runner.model.create(args, dataset.output_dim)
    runner.Runner(args, device, dataset, model).run()

Importing this package is cheap (pydantic + yaml only): the spec model is used by the web
app, which never imports torch. ``device``, ``data``, ``model``, ``Runner``, ``init`` and
``teardown`` import torch on first use. Nothing here imports Django or Celery.
"""
from __future__ import annotations

import importlib
from typing import Any

from workers.runner.arguments import Arguments, load_arguments
from workers.runner.config import JobSpec, SpecError, load_file, parse_spec

__all__ = ["Arguments", "JobSpec", "Runner", "SpecError", "data", "device", "init", "load_arguments",
           "load_file", "model", "parse_spec", "teardown"]

_LAZY_MODULES = ("device", "data", "model")
_LAZY_ATTRS = {"Runner": "workers.runner.train", "init": "workers.runner.lifecycle",
               "teardown": "workers.runner.lifecycle"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(f"workers.runner.{name}")
    if name in _LAZY_ATTRS:
        return getattr(importlib.import_module(_LAZY_ATTRS[name]), name)
    raise AttributeError(f"module 'workers.runner' has no attribute {name!r}")
