"""One process, one device: the base behaviour as is."""
from __future__ import annotations

from workers.runner.strategies.base import Strategy


class SingleStrategy(Strategy):
    name = "single"
