"""Parallel strategies: each shards the graph, supplies a GraphView for its rank and keeps
dense parameters and metrics in agreement across ranks."""

from __future__ import annotations

from .base import Shard, Strategy
from .single import SingleProcess

STRATEGIES = {"single": SingleProcess}


def get_strategy(name: str, **options) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return STRATEGIES[name](**options)


__all__ = ["STRATEGIES", "Shard", "Strategy", "SingleProcess", "get_strategy"]
