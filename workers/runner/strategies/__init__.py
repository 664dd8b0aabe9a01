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



def for_spec(spec) -> type[Strategy]:
    """The strategy class that runs ``spec``: its own, wrapped with cross-site sync when it has ``sync``."""
    cls = STRATEGIES[spec.strategy_name]
    if spec.sync is None:
        return cls
    from workers.runner.strategies.sync import build

    return build(cls)


__all__ = ["STRATEGIES", "Strategy", "for_spec"]
