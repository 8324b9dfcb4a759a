"""Parallel strategies: each shards the graph, supplies a GraphView for its rank and keeps
dense parameters and metrics in agreement across ranks. The registry (``gnnmesh.strategies``)
names each one and its factory (``factories``)."""

from __future__ import annotations

from .strategy import Shard, Strategy
from .single import SingleProcess


__all__ = ["Shard", "Strategy", "SingleProcess"]
