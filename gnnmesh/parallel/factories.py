"""The built-in strategies' factories, ``(config, layout, device) -> Strategy``, which the
registry (``gnnmesh.strategies``) names. Each reads only its own sections of a resolved config
and imports its strategy when called, so that a run loads the one it uses."""

from __future__ import annotations

from ..validate import parse_bytes


def single(config, layout, device):
    """One process; under ``--minibatch`` the mini-batch contract's single-process form (its
    every first layer its own)."""
    if config.training.minibatch:
        from .minibatch import SingleProcessMiniBatch
        return SingleProcessMiniBatch()
    from .single import SingleProcess
    return SingleProcess()


def partition(config, layout, device):
    from .partition.strategy import PartitionParallel
    part = config.partition
    return PartitionParallel(layout, device, method=part.partitioner, epsilon=part.epsilon,
                             seed=config.training.seed, partition_file=part.partition_file)


def tensor(config, layout, device):
    from .tensor.strategy import TensorParallel
    return TensorParallel(layout, device, chunk_size=config.tensor.chunk_size, pipeline=config.tensor.pipeline)


def tensor_host_store(config, layout, device):
    from .tensor.host_store import TensorOffload
    return TensorOffload(layout, device, **host_tier(config))


def grid3d(config, layout, device):
    from .grid3d.strategy import Grid3D
    return Grid3D(layout, device, permute=config.grid3d.permute, blocks=config.grid3d.blocks,
                  seed=config.training.seed)


def offload(config, layout, device):
    from .offload import Offload
    part = config.partition
    return Offload(layout, device, intermediates=config.offload.intermediates, method=part.partitioner,
                   epsilon=part.epsilon, seed=config.training.seed, partition_file=part.partition_file,
                   **host_tier(config))


def minibatch(config, layout, device):
    from .minibatch import MiniBatchParallel
    part = config.partition
    return MiniBatchParallel(layout, device, config.run.strategy, method=part.partitioner, epsilon=part.epsilon,
                             seed=config.training.seed, partition_file=part.partition_file)


def host_tier(config) -> dict:
    """The settings of a strategy whose vertex data lives in a host store."""
    tier = config.host_tier
    return dict(device_memory=parse_bytes(tier.device_memory, "device_memory"), host_store=tier.host_store,
                store_dir=tier.store_dir, chunks=None if tier.chunks == "auto" else int(tier.chunks),
                dedup=tier.dedup, reorganize=tier.reorganize, overlap=tier.overlap)
