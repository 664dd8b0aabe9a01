"""The FedML-shaped Python API, used in-process the way a notebook or a custom driver would."""
from __future__ import annotations

import signal

import pytest
import torch

from workers import runner


@pytest.fixture
def keep_signal_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_the_fedml_shaped_api_trains_a_model_in_process(tmp_path, keep_signal_handlers):
    args = runner.load_arguments({"name": "api", "data": {"dataset": "iris", "batch_size": 16},
                                  "model": {"name": "mlp", "hidden": 16},
                                  "train": {"epochs": 20, "lr": 0.01, "log_every_steps": 50}},
                                 run_dir=tmp_path / "run")
    runner.init(args)
    try:
        device = runner.device.get_device(args)
        dataset = runner.data.load(args)
        model = runner.model.create(args, dataset.output_dim)
        metrics = runner.Runner(args, device, dataset, model).run()
    finally:
        runner.teardown(args)

    assert device == torch.device("cpu")
    assert dataset.output_dim == 3 and args.train.epochs == 20
    assert metrics["val_acc"] > 0.8
    assert (tmp_path / "run" / "model.pt").exists()
    assert (tmp_path / "run" / "config.resolved.yaml").exists()


def test_load_arguments_refuses_an_invalid_spec_by_field():
    with pytest.raises(runner.SpecError) as err:
        runner.load_arguments({"train": {"optimizer": "lion"}})
    assert "train.optimizer" in err.value.errors
