"""Every full-graph strategy for a graph on P ranks, ranked by the models of ``partition``,
``tensor`` and ``grid3d``: ``rank_strategies``.

The candidates are 1D partition parallelism under each partitioner (the partition is
computed, or read from the partition store, so its bytes are exact and its partitioning time
is the candidate's setup), tensor parallelism (its decoupled form when the model is), and
every X x Y x Z grid of P ranks. They are ranked by ``epoch_s + setup_s / epochs``: the
predicted epoch with the one-off setup spread over the run. Ranked for ``inference``, each
candidate's ``epoch_s`` is one inference pass (the evaluation's forward in eval mode alone)
and its setup counts in full (``epochs`` is 1). Each model's bytes are checked
against runs on its own (``tests/planner/test_estimates.py``); the ranking across strategies,
which rests on their times, is checked against measured epochs by ``benchmarks/planner.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..errors import ConfigError
from ..layout.grid import RANK_ORDER, factorizations
from ..models.base import GraphLayer, LayerStack
from ..partition import MissingExtraError, partition
from ..partition.base import RANKED_METHODS
from ..view import OPERATORS
from . import offload as offload_model
from . import partition as partition_model
from . import tensor as tensor_model
from .estimate import Estimate
from .grid3d import Prediction, Workload, payload_bytes, peak_bytes, predict
from .machine import ComputeRates, Network
from .sized import SizedGraph
from .trace import build



@dataclass(frozen=True)
class Dropped:
    """A candidate left out of the ranking, and why."""
    name: str
    reason: str


@dataclass(frozen=True)
class Ranking:
    """``ranked``: the candidates' Estimates, best first; ``dropped``: those left out;
    ``epochs``: how many epochs the setup is spread over; ``inference``: each Estimate is one
    inference pass, its setup counted in full (``epochs`` is 1)."""
    ranked: tuple
    dropped: tuple
    epochs: int
    inference: bool = False

    def cost(self, estimate: Estimate) -> float:
        return cost(estimate, self.epochs)


def input_width(graph) -> int:
    """The width of the features a run trains ``graph`` with: its own, else the trainer's
    degree features (in-degree, and out-degree when directed)."""
    return graph.num_features or (2 if graph.directed else 1)


def cost(estimate: Estimate, epochs: int) -> float:
    """What the ranking sorts on: seconds per epoch with the setup spread over ``epochs``."""
    return estimate.epoch_s + estimate.setup_s / epochs


def rank_strategies(graph, ranks: int, model: str, widths, rates: ComputeRates, network: Network,
                    ranks_per_node: Optional[int] = None, *, epochs: int = 200, memory_limit: Optional[int] = None,
                    partitioners=RANKED_METHODS, decoupled: bool = False, evaluate: bool = True, seed: int = 0,
                    epsilon: float = 0.01, cache: bool = True, cache_dir=None, order: str = RANK_ORDER,
                    inference: bool = False, **options) -> Ranking:
    """Rank the strategies for ``model`` (``decoupled``: its decoupled form; ``options``: the
    constructor's, e.g. ``heads``, ``k``) with ``widths`` (input, hidden..., classes; GAT's
    hidden per head) on ``graph`` (a loaded Graph) over ``ranks`` ranks, ``ranks_per_node``
    to a node (default: one node).

    ``partitioners``: the methods to partition with, through ``gnnmesh.partition.partition``
    (``epsilon``, ``seed``, and the store: ``cache``, ``cache_dir``); one whose package is
    missing is dropped with the reason. Tensor parallelism is the plain one, or the
    decoupled one for a decoupled model. grid3d is priced for GCN only (``grid3d.predict``);
    for another model it is dropped with the reason; its peak memory is the rough
    ``grid3d.peak_bytes`` and its setup (permutations, cutting blocks) is not modelled (0).
    ``memory_limit``: bytes per rank; a candidate whose largest peak exceeds it is dropped,
    and out-of-core training (``offload``) with that fast-tier budget joins the candidates,
    on each partition (or the single process), dropped with the reason where no plan fits.
    ``epochs``: how many epochs the setup is spread over. On one rank the one candidate is
    the single process.

    ``inference``: rank for one full-graph inference pass instead of training: every
    candidate's ``epoch_s`` is the predicted time of the evaluation's forward pass alone
    (eval mode: no dropout, no backward, gradient exchange or loss), its peak that of a
    pass without gradients where the model knows one, and its setup counts in full: the
    ranking's ``epochs`` is 1 (``epochs`` and ``evaluate`` are moot)."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    epochs = 1 if inference else epochs
    common = dict(decoupled=decoupled, inference=inference, **options)
    candidates, dropped = [], []

    def out_of_core(assignment, name):
        """The offload candidate on ``assignment``, when a memory limit asks for one."""
        if memory_limit is None:
            return
        try:
            candidates.append(offload_model.estimate(graph, assignment, widths, model, rates, network,
                                                     ranks_per_node, evaluate, budget=memory_limit, **common))
        except ConfigError as err:
            dropped.append(Dropped(name, str(err)))

    if ranks == 1:   # one process: the single process, or out of core
        adj = getattr(graph, "adj", graph)
        alone = np.zeros(adj.shape[0], dtype=np.int64)
        one = partition_model.estimate(graph, alone, widths, model, rates, network, 1, evaluate, **common)
        candidates.append(replace(one, strategy="single", settings={"strategy": "single"}))
        out_of_core(alone, "offload")
        return _ranked(candidates, dropped, epochs, memory_limit, inference)
    for method in partitioners:
        try:
            part = partition(graph, ranks, method, epsilon=epsilon, seed=seed, cache=cache, cache_dir=cache_dir)
        except MissingExtraError as err:
            dropped.append(Dropped(f"partition {method}", str(err)))
            continue
        candidates.append(partition_model.estimate(graph, part, widths, model, rates, network, ranks_per_node,
                                                   evaluate, **common))
        out_of_core(part, f"offload {method}")
    candidates.append(tensor_model.estimate(graph, ranks, widths, model, rates, network, ranks_per_node, evaluate,
                                            **common))
    adj = getattr(graph, "adj", graph)
    _grids(candidates, dropped, adj.shape[0], OPERATORS["gcn"](adj).nnz, ranks, model, widths, rates, network,
           ranks_per_node, evaluate, order, decoupled, options, inference)
    return _ranked(candidates, dropped, epochs, memory_limit, inference)


def rank_sized(graph: SizedGraph, ranks: int, model: str, widths, rates: ComputeRates, network: Network,
               ranks_per_node: Optional[int] = None, *, epochs: int = 200, memory_limit: Optional[int] = None,
               partitioners=RANKED_METHODS, decoupled: bool = False, evaluate: bool = True, order: str = RANK_ORDER,
               inference: bool = False, **options) -> Ranking:
    """``rank_strategies`` for a graph known by its size (``SizedGraph``): the random
    partition with its expected halos (an upper bound, see ``sized``), tensor parallelism
    and every grid. The partitioners that follow the graph's structure, and out-of-core
    training (whose chunks do), are dropped with the reason. ``inference``: as there."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    epochs = 1 if inference else epochs
    common = dict(decoupled=decoupled, inference=inference, **options)
    candidates, dropped = [], []
    if memory_limit is not None:
        dropped.append(Dropped("offload", "its chunks follow the graph's own structure: give --dataset"))
    if ranks == 1:
        one = partition_model.random_estimate(graph, 1, widths, model, rates, network, 1, evaluate, **common)
        return _ranked([replace(one, strategy="single", settings={"strategy": "single"})], dropped, epochs,
                       memory_limit, inference)
    for method in partitioners:
        if method == "rp":
            candidates.append(partition_model.random_estimate(graph, ranks, widths, model, rates, network,
                                                              ranks_per_node, evaluate, **common))
        else:
            dropped.append(Dropped(f"partition {method}", "it partitions the graph's own structure: give "
                                                          "--dataset"))
    candidates.append(tensor_model.sized_estimate(graph, ranks, widths, model, rates, network, ranks_per_node,
                                                  evaluate, **common))
    _grids(candidates, dropped, graph.nodes, graph.operator("gcn").nnz, ranks, model, widths, rates, network,
           ranks_per_node, evaluate, order, decoupled, options, inference)
    return _ranked(candidates, dropped, epochs, memory_limit, inference)


def _grids(candidates: list, dropped: list, nodes: int, gcn_nnz: int, ranks: int, model: str, widths, rates,
           network, ranks_per_node, evaluate: bool, order: str, decoupled: bool, options: dict,
           inference: bool = False) -> None:
    """Every grid3d grid of ``ranks`` into ``candidates``, or grid3d into ``dropped`` with why."""
    net = build(widths, model, decoupled, **options)
    refusal = grid3d_refusal(net, model, decoupled)
    if refusal:
        dropped.append(Dropped("grid3d", refusal))
        return
    work = Workload(nodes, gcn_nnz, tuple(int(w) for w in widths), evaluate=evaluate, dropout=net.dropout > 0,
                    inference=inference)
    candidates += [grid3d_estimate(work, predict(work, grid, rates, network, ranks_per_node, order))
                   for grid in factorizations(ranks)]


def _ranked(candidates: list, dropped: list, epochs: int, memory_limit: Optional[int],
            inference: bool = False) -> Ranking:
    """``candidates`` best first, less those over ``memory_limit`` (added to ``dropped``)."""
    kept = []
    for estimate in candidates:
        peak = max(estimate.peak_bytes)
        if memory_limit is not None and peak > memory_limit:
            dropped.append(Dropped(estimate.strategy, f"peak {peak / 2**20:.3g} MiB per rank is over the "
                                                      f"limit of {memory_limit / 2**20:.3g} MiB"))
        else:
            kept.append(estimate)
    return Ranking(tuple(sorted(kept, key=lambda e: (cost(e, epochs), e.strategy))), tuple(dropped), epochs,
                   inference)


def grid3d_refusal(net, model: str, decoupled: bool) -> Optional[str]:
    """Why grid3d is not a candidate for ``net`` (the built ``model``), or None. The strategy
    runs models whose layers are sums of aggregation terms (what ``Grid3D`` checks); its
    performance model prices GCN layers."""
    name = f"decoupled {model}" if decoupled else model
    if decoupled or not (isinstance(net, LayerStack) and all(isinstance(layer, GraphLayer) for layer in net.layers)):
        return f"the grid3d strategy does not run {name}"
    if model != "gcn":
        return f"the grid3d strategy runs {name}, but its performance model prices GCN layers only"
    return None


def grid3d_estimate(work: Workload, prediction: Prediction) -> Estimate:
    """A grid's Prediction as an Estimate: the collectives' seconds per process group
    (``comm x``, ... ``comm world``), one phase ``collectives`` of ``payload_bytes`` per rank
    (every rank alike under an even spread), the rough ``peak_bytes``; no setup."""
    grid, ranks = prediction.grid, prediction.grid.size
    comm = {f"comm {group}": seconds for group, seconds in prediction.comm.items()}
    return Estimate.build({"aggregate": prediction.spmm, "dense": prediction.dense}, comm,
                          {"collectives": [payload_bytes(work, grid)] * ranks}, [peak_bytes(work, grid)] * ranks,
                          strategy="grid3d", grid=f"{grid.x},{grid.y},{grid.z}")
