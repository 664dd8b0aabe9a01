"""Strategies: how a workload is spread over processes. One file per backend, one registry."""
from __future__ import annotations

from workers.runner.strategies.base import Strategy
from workers.runner.strategies.ddp import DDPStrategy
from workers.runner.strategies.deepspeed import DeepSpeedStrategy
from workers.runner.strategies.single import SingleStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    "single": SingleStrategy,
    "ddp": DDPStrategy,
    "deepspeed": DeepSpeedStrategy,
}

__all__ = ["STRATEGIES", "Strategy"]
