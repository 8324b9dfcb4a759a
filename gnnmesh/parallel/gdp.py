"""Graph data parallelism (APT's GDP): every rank holds the whole graph, samples the blocks of
its own share of each batch's seeds and loads their features itself; gradients are summed
over ranks. Sampling keyed by node makes the ranks' blocks, together, what one process
samples for the whole batch, so the step equals the single process's."""

from __future__ import annotations

from .distributed import DistributedStrategy
from .single import SingleProcess


class GraphDataParallel(DistributedStrategy):
    name = "gdp"

    def __init__(self, layout, device):
        super().__init__(layout, device, "rows")

    def describe(self) -> str:
        return f"gdp ({self.world_size} ranks)"

    shard = SingleProcess.shard  # the whole graph on every rank
