"""The registry of vertex partitioners: the one place a partitioner is named.

Each partitioner is declared once, as a ``PartitionerSpec``: its name, where it runs (one
process holding the graph, or also ranks each holding a block of it), what it balances, the
optional package it needs, the version of its output, and where its function lives. The
settings (``--partitioner`` choices and default), ``partition()``, the partition store, the
planner, the parts written from a sharded input and the partition report read it.

Code is named by "module:attribute" and imported only when used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import ConfigError
from ..registries import add

# The partitioner a run uses when none is given: the hypergraph partitioner, for the lowest
# communication volume. It needs the [partitioners] extra; a plain install is refused in one
# line naming the extra and --partitioner lp, which needs nothing (the getting-started extras say so).
DEFAULT = "hp"
# The one a partition made on ranks each holding a block (parts from --input) uses by default.
DEFAULT_ON_BLOCKS = "lp"
# The package the optional partitioners need, and how to install it.
EXTRA_HINT = "pip install 'gnnmesh[partitioners]'"


@dataclass(frozen=True)
class PartitionerSpec:
    """One vertex partitioner as the rest of gnnmesh sees it.

    ``function``: "module:attribute" of ``(adj, parts, epsilon, seed) -> assignment`` (one
    process holding the graph), or of ``stochastic_partition`` for a ``sampled`` one.
    ``sampled``: it partitions for sampled mini-batches and takes the sampling settings, so
    it is not a ``partition()`` method. ``distributed``: "module:attribute" of its form that
    runs on ranks each holding a block of the graph (``gnnmesh partition --input``), or None.
    ``balances``: "vertices" (vertex counts, and nonzeros where it can) or "nonzeros" (a part
    may hold far more than its share of vertices). ``extra``: the optional package it needs
    (``EXTRA_HINT``), or None. ``ranked``: the planner ranks it for a run (a baseline is not).
    ``structural``: it follows the graph's structure, so a graph known by its size alone
    cannot be priced under it. ``preset``: "module:attribute" of the function naming the
    preset it runs with (recorded with the partition), or None. ``version``: bumped when its
    output changes, so that stored partitions are recomputed. ``summary``: one line of help."""

    name: str
    function: str
    summary: str = ""
    sampled: bool = False
    distributed: Optional[str] = None
    balances: str = "vertices"
    extra: Optional[str] = None
    ranked: bool = False
    structural: bool = True
    preset: Optional[str] = None
    version: int = 1

    def load(self) -> Callable:
        """The partitioner's function."""
        return load(self.function)


REGISTRY: dict = {}


def register(spec: PartitionerSpec) -> PartitionerSpec:
    """Add ``spec`` to the registry."""
    return add(REGISTRY, spec.name, spec, "partitioner")


_METHODS = "gnnmesh.partition.methods"
_BLOCKS = "gnnmesh.parallel.partition.parts_from_shards"
for _spec in (
    PartitionerSpec("rp", f"{_METHODS}:random", "random", distributed=f"{_BLOCKS}:random_assignment", ranked=True,
                    structural=False, version=2),
    PartitionerSpec("contiguous", f"{_METHODS}:contiguous", "id ranges", distributed=f"{_BLOCKS}:contiguous_assignment",
                    balances="nonzeros"),
    PartitionerSpec("gp", f"{_METHODS}:metis", "METIS graph partitioning", extra="pymetis", ranked=True, version=2),
    PartitionerSpec("hp", f"{_METHODS}:hypergraph", "hypergraph partitioning, exact volume", balances="nonzeros",
                    extra="mtkahypar", ranked=True, preset=f"{_METHODS}:hp_preset", version=3),
    PartitionerSpec("lp", f"{_METHODS}:label_propagation", "multilevel label propagation, balancing vertices and "
                    "nonzeros as gp does", distributed=f"{_BLOCKS}:propagated_assignment"),
    PartitionerSpec("shp", "gnnmesh.partition.stochastic:stochastic_partition", "stochastic hypergraph "
                    "partitioning, the expected volume of sampled mini-batches", sampled=True, balances="nonzeros",
                    extra="mtkahypar", preset=f"{_METHODS}:hp_preset"),
):
    register(_spec)


def names(*, sampled: Optional[bool] = None, distributed: bool = False, ranked: bool = False) -> tuple:
    """The partitioners' names in registry order; ``sampled``: only those that are (True) or
    are not (False); ``distributed``, ``ranked``: only those that run on blocks, that a plan ranks."""
    return tuple(name for name, s in REGISTRY.items()
                 if (sampled is None or s.sampled == sampled) and (not distributed or s.distributed)
                 and (not ranked or s.ranked))


def spec(name: str, what: str = "partitioning method") -> PartitionerSpec:
    """The partitioner called ``name``; a ConfigError naming the choices otherwise."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown {what} {name!r}; choose from {', '.join(REGISTRY)}")
    return REGISTRY[name]


def load(ref: str) -> Callable:
    """The object a "module:attribute" reference names."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)
