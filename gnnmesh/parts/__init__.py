"""Partitioned datasets on disk: written once by ``gnnmesh partition --write-parts DIR``,
then every rank of ``gnnmesh train --parts DIR`` reads its own folder and nothing else."""

from .partition import write_partition_parts
from .store import MANIFEST, Parts, RankPart, open_parts

__all__ = ["write_partition_parts", "open_parts", "Parts", "RankPart", "MANIFEST"]
