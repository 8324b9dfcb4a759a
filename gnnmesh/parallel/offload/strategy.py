"""1D out-of-core training (HongTu, Wang et al., SIGMOD 2024): ``--strategy offload``.

Ranks own a vertex partition; every layer's vertex data and gradients live in the rank's
host tier (``host_tier.HostTier``), and the fast tier holds one chunk of one stage at a time.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...layout import ParallelLayout
from ...partition.registry import DEFAULT as DEFAULT_PARTITIONER
from ..agreed_partition import agreed_partition
from .plan import epoch_traffic, footprint, trained_params
from .host_tier import HostRows, HostTier, HostTierStrategy
from .pipeline import FEATURES


class Offload(HostTierStrategy):
    name = "offload"
    reported_phases = ("offload",)

    def __init__(self, layout: ParallelLayout, device, device_memory: int, host_store: str = "ram",
                 store_dir: Optional[str] = None, chunks: Optional[int] = None, intermediates: str = "auto",
                 dedup: str = "both", reorganize: bool = True, method: str = DEFAULT_PARTITIONER, epsilon: float = 0.01,
                 seed: int = 0, partition_file: Optional[str] = None, overlap: Optional[bool] = None):
        """``chunks``: K, or None to take the smallest K whose estimated footprint fits
        ``device_memory`` (bytes); ``overlap``: None for on with CUDA (``HostTier``)."""
        super().__init__(layout, device, "rows")
        self.method, self.epsilon, self.seed, self.partition_file = method, epsilon, seed, partition_file
        self.host = HostTier(self.comm, self.device, device_memory, host_store, store_dir, chunks, intermediates,
                             dedup, reorganize, overlap)
        self.pipeline = self.passes = None
        self.learns_inputs = False  # the input rows take a gradient (learned embeddings)

    def describe(self) -> str:
        if self.pipeline is None:
            return f"offload ({self.world_size} ranks)"
        plan = self.pipeline.plan
        return (f"offload ({self.world_size} ranks, {plan.k} chunks each, dedup {plan.mode}"
                f"{', reorganized' if plan.reorganized else ''}{', overlapped' if plan.overlap else ''}, "
                f"{self.host.store.kind} host store, "
                f"budget {self.host.budget / 2**20:.0f} MiB)")

    # -- setup ----------------------------------------------------------------------------------
    def rank_data(self, graph, x, seed, device):
        if self.world_size > 1:
            _, assignment = agreed_partition(graph, self.world_size, self.rank, self.method, self.epsilon,
                                             self.seed, self.partition_file)
            assignment = assignment.numpy()
        else:
            assignment = np.zeros(graph.num_nodes, dtype=np.int64)
        self.adj, self.mask_seed = graph.adj, seed
        self.owned = [np.flatnonzero(assignment == r) for r in range(self.world_size)]
        mine = torch.from_numpy(self.owned[self.rank])
        self.in_dim = x.shape[1]
        return self.host.rank_data(graph, FEATURES, x[mine], mine, mine, seed, device)

    def input_rows(self, data):
        self.learns_inputs = True  # the pipeline sums the features' gradient in the host tier
        return HostRows(self.host.store, FEATURES, self.owned[self.rank])

    def prepare(self, model) -> None:
        host = self.host
        stages = host.stages(model, self.in_dim)
        classes, heads = stages[-1].width, getattr(model, "heads", 1)
        plan = host.plan(self.adj, self.owned, self.rank, self.in_dim, stages, classes, heads,
                         params=trained_params(model))
        self.passes = host.run(self.adj, plan, stages, self.comm, self.rank, self.mask_seed,
                               input_grad=self.learns_inputs)
        self.pipeline, self.stages = host.pipeline, stages
        host.count_baselines(self.pass_traffic)
        host.plan_figures = {"replication": round(plan.replication(), 4), "chunks": plan.k,
                             "budget_bytes": host.budget, "host_tier_bytes": host.host_bytes(),
                             "footprint_estimate_bytes": max(footprint(plan, stages, classes, heads))}

    def pass_traffic(self, mode: str) -> dict:
        """``{"load": (training, evaluation), "store": (...)}``: host->fast and fast->host bytes of
        one training pass and of one evaluation pass, all ranks', with dedup ``mode`` (the plan's,
        or none or inter: the baselines the report compares with)."""
        passes = [epoch_traffic(self.pipeline.plan, self.stages, *p, mode=mode, input_grad=self.learns_inputs)
                  for p in ((1, 0), (0, 1))]
        return {kind: tuple(t.total(kind) for t in passes) for kind in ("load", "store")}
