"""Parallel strategies: each splits the graph among the ranks (what a rank holds: ``RankData``),
supplies a GraphView for its rank and keeps dense parameters and metrics in agreement across
ranks. The registry (``gnnmesh.strategies``) names each one and its factory (``factories``)."""

from __future__ import annotations

from . import strategy as _strategy
from .strategy import RankData, Strategy
from .single import SingleProcess


__all__ = ["RankData", "Strategy", "SingleProcess"]


def __getattr__(name: str):
    """Former names, still importable with a DeprecationWarning (``Shard``: ``RankData``)."""
    return _strategy.__getattr__(name)
