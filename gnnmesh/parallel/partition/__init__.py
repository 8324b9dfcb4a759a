"""The partition strategy (1D, Demirci et al.): vertex rows split among ranks by a partitioner,
the halo rows each rank reads exchanged every layer.

    strategy.py            the engine (PartitionParallel) and the agreed partition every rank uses
    halo.py                the overlapped halo exchange and each rank's operator blocks
    parts.py               the partition parts writer (from a whole graph)
    parts_from_shards.py   the same parts written by P ranks from a sharded input
"""
