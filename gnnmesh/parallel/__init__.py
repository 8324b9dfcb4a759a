"""Parallel strategies: each shards the graph, supplies a GraphView for its rank and keeps
dense parameters and metrics in agreement across ranks."""

from __future__ import annotations

from ..validate import parse_bytes
from .strategy import Shard, Strategy
from .single import SingleProcess


def build_strategy(config, layout, device) -> Strategy:
    """The strategy ``config.strategy`` for this rank on ``layout`` (a ParallelLayout checked
    against the job's ranks; the process group must be initialized)."""
    config = config.resolved()  # the strategy's defaults, if the caller left them unset
    if config.strategy == "single":
        return SingleProcess()
    if config.strategy == "partition":
        from .partition import PartitionParallel
        return PartitionParallel(layout, device, method=config.partitioner, epsilon=config.epsilon,
                                 seed=config.seed, partition_file=config.partition_file)
    if config.strategy == "tensor" and config.host_store is not None:
        from .tensor_offload import TensorOffload
        return TensorOffload(layout, device, **_host_tier(config))
    if config.strategy == "tensor":
        from .tensor import TensorParallel
        return TensorParallel(layout, device, chunk_size=config.chunk_size, pipeline=config.pipeline)
    if config.strategy == "grid3d":
        from .grid3d import Grid3D
        return Grid3D(layout, device, permute=config.permute, blocks=config.blocks, seed=config.seed)
    if config.strategy == "offload":
        from .offload import Offload
        return Offload(layout, device, intermediates=config.intermediates, method=config.partitioner,
                       epsilon=config.epsilon, seed=config.seed, partition_file=config.partition_file,
                       **_host_tier(config))
    if config.minibatch and config.strategy != "single":
        from .minibatch import MiniBatchParallel
        return MiniBatchParallel(layout, device, config.strategy, method=config.partitioner,
                                 epsilon=config.epsilon, seed=config.seed, partition_file=config.partition_file)
    raise ValueError(f"unknown strategy {config.strategy!r}")


def _host_tier(config) -> dict:
    """The settings of a strategy whose vertex data lives in a host store."""
    return dict(device_memory=parse_bytes(config.device_memory, "device_memory"), host_store=config.host_store,
                store_dir=config.store_dir, chunks=None if config.chunks == "auto" else int(config.chunks),
                dedup=config.dedup, reorganize=config.reorganize)


__all__ = ["Shard", "Strategy", "SingleProcess", "build_strategy"]
