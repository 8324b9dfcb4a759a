"""Vertex partitioning: which rank owns each vertex, for the partition strategy's row-parallel
training (its halo exchanges: Demirci, Haldar, Ferhatosmanoglu, PVLDB 2022) and for the
mini-batch routes that place vertices on ranks (snp, dnp).

    >>> from gnnmesh.partition import partition, halos, quality
    >>> part = partition(graph, 8, "hp", epsilon=0.01, seed=0)    # cached on disk
    >>> exchanges = halos(graph.adj, part.assignment, part.parts)  # who sends what to whom
    >>> quality(graph.adj, part)["volume_total"]                   # rows moved per layer

Methods: ``rp`` random, ``contiguous`` id ranges, ``gp`` METIS (pymetis), ``hp`` column-net
hypergraph with Mt-KaHyPar (``gp`` and ``hp`` need ``pip install 'gnnmesh[partitioners]'``).
For mini-batch training, ``shp`` (``stochastic_partition``, also Mt-KaHyPar) partitions the
merged hypergraphs of sampled batches:

    >>> part = stochastic_partition(graph, 8, [10, 5], 1024, seeds_pool=train_ids)
    >>> batch_volumes(graph, [part], [10, 5], 1024, seeds_pool=train_ids)  # rows per held-out batch
"""

from .api import partition
from .base import METHODS, STOCHASTIC_METHODS, MissingExtraError, Partition, graph_key
from .halo import RankHalo, halos, rank_halo, rank_halos
from .quality import connectivity_minus_one, quality
from .store import load_partition, save_partition, store_dir
from .stochastic import batch_volumes, hoeffding_nets, stochastic_partition

__all__ = ["partition", "Partition", "METHODS", "STOCHASTIC_METHODS", "MissingExtraError", "graph_key",
           "RankHalo", "halos", "rank_halo", "rank_halos", "quality", "connectivity_minus_one",
           "load_partition", "save_partition", "store_dir", "stochastic_partition", "batch_volumes",
           "hoeffding_nets"]
