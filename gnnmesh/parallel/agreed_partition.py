"""The one vertex partition every rank of a job uses: rank 0 computes or loads it, the others
receive it. The strategies that place vertices on ranks share it (partition, offload, and the
mini-batch routes that own vertices)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..comm import setup_comm
from ..errors import ConfigError
from ..partition.registry import spec as partitioner_spec


def check_ranks(world: int, nodes: int) -> None:
    if world > nodes:
        raise ConfigError(f"{world} ranks for a graph of {nodes} nodes: every rank needs at least one node")


def agreed_partition(graph, world: int, rank: int, method: str, epsilon: float, seed: int,
                     partition_file: Optional[str] = None, sampling: Optional[dict] = None):
    """(the partition, its vertex -> rank tensor): rank 0 computes (or loads) it and every
    rank receives the same one. ``sampling``: the mini-batch settings ``shp`` samples with."""
    check_ranks(world, graph.num_nodes)
    result = None
    if rank == 0:
        result = _compute_partition(graph, world, method, epsilon, seed, partition_file, sampling)
    result = setup_comm().broadcast_object(result)  # partitioning may take long
    if isinstance(result, Exception):
        raise result
    return result, torch.from_numpy(np.asarray(result.assignment, dtype=np.int64))


def _compute_partition(graph, world, method, epsilon, seed, partition_file, sampling=None):
    try:
        from .. import partition as partitioning
        if partition_file:
            return partitioning.load_partition(partition_file, graph, parts=world)
        if partitioner_spec(method).sampled:
            return partitioning.stochastic_partition(graph, world, epsilon=epsilon, seed=seed, **sampling)
        return partitioning.partition(graph, world, method, epsilon=epsilon, seed=seed)
    except Exception as err:  # shipped to the other ranks so that all stop with the same error
        return err
