"""Out-of-core full-graph training (HongTu, Wang et al., SIGMOD 2024): ``--strategy offload``.

Every layer's vertex data and gradients live in a host tier (``host_store``: RAM, or files);
the fast tier (the GPU, or on CPU the process's working memory) holds one chunk of one
stage at a time, within ``--device-memory``. Ranks own a vertex partition; each rank's part is
cut into chunks of destinations (``chunking``), the model into stages (``stages``), and
``engine`` runs them batch by batch, forward and back, loading rows once per batch and
keeping rows consecutive batches share (``transfers``). ``costs`` predicts the traffic and
the footprint from the plan alone.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ... import memory
from ...comm import agreed
from ...errors import ConfigError
from ...host_store import HostStore
from ...layout import ParallelLayout
from ...validate import format_bytes
from ...view import GraphView
from ..base import Shard
from ..distributed import DistributedStrategy
from ..partition import agreed_partition
from . import costs
from .chunking import Chunking
from .engine import FEATURES, Schedule
from .stages import stages_of
from .view import ChunkView

class OffloadView(GraphView):
    """This rank's rows; the trainer sets the epoch here, the chunks' views follow it."""

    operators_on_device = False

    def __init__(self, adj, owned: torch.Tensor, seed: int, device):
        super().__init__(adj, seed=seed, device=device)
        self.owned = owned

    @property
    def num_nodes(self) -> int:
        return int(self.owned.numel())

    def rows(self):
        return self.owned


class _Offloaded(torch.autograd.Function):
    """A whole out-of-core pass as one autograd node: forward returns the logits, backward
    runs the chunked backward pass and returns the parameters' gradients. ``passes`` has
    ``forward(epoch, training)`` and ``backward(epoch, grad_logits, params)``."""

    @staticmethod
    def forward(ctx, passes, epoch, *params):
        ctx.passes, ctx.epoch, ctx.params = passes, epoch, params
        return passes.forward(epoch, training=True)

    @staticmethod
    def backward(ctx, grad_logits):
        grads = ctx.passes.backward(ctx.epoch, grad_logits.contiguous(), list(ctx.params))
        return (None, None, *grads)


class _Passes:
    """A schedule's passes over the views of its chunks."""

    def __init__(self, schedule, views: list):
        self.schedule, self.views = schedule, views

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        return self.schedule.forward(self.views, epoch, training)

    def backward(self, epoch: int, grad_logits: torch.Tensor, params: list) -> list:
        return self.schedule.backward(self.views, epoch, grad_logits, params)


def chunk_views(adj, plan, stages: list, rank: int, seed: int, device) -> list:
    """One view per batch of ``plan`` for ``rank``, its operators' blocks cut now: the
    topology is built before training, not inside the budget."""
    operators: dict = {}  # the whole graph's, only while the chunks' blocks are cut from them
    views = [ChunkView(adj, plan.chunk(rank, b), operators, seed, device) for b in range(plan.batches)]
    for view in views:
        view.build({name for stage in stages for name in stage.operators})
    return views


class Offload(DistributedStrategy):
    name = "offload"
    reported_phases = ("offload",)
    holds_memory_budget = True
    mesh_dim = "rows"  # the layout's dimension its ranks lie on

    def __init__(self, layout: ParallelLayout, device, device_memory: int, host_store: str = "ram",
                 store_dir: Optional[str] = None, chunks: Optional[int] = None, intermediates: str = "auto",
                 dedup: str = "both", reorganize: bool = True, method: str = "hp", epsilon: float = 0.01,
                 seed: int = 0, partition_file: Optional[str] = None):
        """``chunks``: K, or None to take the smallest K whose estimated footprint fits
        ``device_memory`` (bytes)."""
        super().__init__(layout, device, self.mesh_dim)
        self.budget, self.chunks, self.intermediates = int(device_memory), chunks, intermediates
        self.dedup, self.reorganize = dedup, reorganize
        self.method, self.epsilon, self.seed, self.partition_file = method, epsilon, seed, partition_file
        where = None if store_dir is None else str(Path(store_dir) / f"rank{self.rank}")
        self.store = agreed(lambda: HostStore(host_store, self.device, where))  # refused before training
        weakref.finalize(self, self.store.close)  # its files go when the run ends, however it ends
        self.schedule = self.passes = None
        self._passes = {"train": 0, "eval": 0}
        self._baseline_rss = 0.0

    def describe(self) -> str:
        if self.schedule is None:
            return f"offload ({self.world_size} ranks)"
        plan = self.schedule.plan
        return (f"offload ({self.world_size} ranks, {plan.k} chunks each, dedup {plan.mode}"
                f"{', reorganized' if plan.reorganized else ''}, {self.store.kind} host store, "
                f"budget {self.budget / 2**20:.0f} MiB)")

    # -- setup ----------------------------------------------------------------------------------
    def shard(self, graph, x, seed, device):
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
        self.store.create(FEATURES, len(mine), self.in_dim)
        self.store.write(FEATURES, range(len(mine)), x[mine])
        self.store.take()
        self.comm.take()
        view = OffloadView(graph.adj, mine, seed, device)
        pick = (lambda t: t[mine].to(device))
        # The features live in the host tier: the shard's x is an empty stand-in.
        return Shard(view, torch.empty((len(mine), 0)), pick(graph.y), pick(graph.train_mask),
                     pick(graph.val_mask), pick(graph.test_mask))

    def prepare(self, model) -> None:
        stages = stages_of(model, self.in_dim, self.intermediates)
        classes, heads = stages[-1].width, getattr(model, "heads", 1)
        plan = make_plan(self.adj, self.owned, self.rank, self.in_dim, stages, classes, heads, self.budget,
                         self.chunks, self.dedup, self.reorganize)
        plan.keep_own_steps()  # built and counted now, before the budget's baseline
        self.schedule = Schedule(plan, stages, self.store, self.comm, self.device)
        self.passes = _Passes(self.schedule, chunk_views(self.adj, plan, stages, self.rank, self.mask_seed,
                                                         self.device))
        self.stages = stages
        self._loads = {mode: self.pass_traffic(mode)["load"] for mode in ("none", "inter")}
        # What every epoch reports of the plan, which does not change.
        self._plan_figures = {"replication": round(plan.replication(), 4), "chunks": plan.k,
                              "budget_bytes": self.budget,
                              "host_tier_bytes": sum(self.comm.all_gather_object(self.store.nbytes())),
                              "footprint_estimate_bytes": max(costs.footprint(plan, stages, classes, heads))}

    def pass_traffic(self, mode: str) -> dict:
        """``{"load": (training, evaluation), "store": (...)}``: host->fast and fast->host bytes of
        one training pass and of one evaluation pass, all ranks', with dedup ``mode`` (the plan's,
        or none or inter: the baselines the report compares with)."""
        passes = [costs.epoch_traffic(self.schedule.plan, self.stages, *p, mode=mode) for p in ((1, 0), (0, 1))]
        return {kind: tuple(t.total(kind) for t in passes) for kind in ("load", "store")}

    # -- training -------------------------------------------------------------------------------
    def forward(self, model, view, x):
        if self.passes is None:
            self.prepare(model)
        if torch.is_grad_enabled() and model.training:
            self._passes["train"] += 1
            params = [p for p in model.parameters() if p.requires_grad]
            return _Offloaded.apply(self.passes, view.epoch, *params)
        self._passes["eval"] += 1
        with torch.no_grad():
            return self.passes.forward(view.epoch, training=model.training)

    # -- reporting ------------------------------------------------------------------------------
    def reset_counters(self) -> None:
        super().reset_counters()
        self.store.take()
        self._passes = {"train": 0, "eval": 0}
        if self.schedule is not None:
            self.schedule.kept_bytes, self.schedule.recompute_seconds = 0, 0.0
        # Setup is done: the topology and host tier are in place, the fast tier's use starts here,
        # from what setup holds (not what it freed).
        memory.release_freed(collect=True)
        self._baseline_rss = memory.restart_peaks(self.device)

    def rank_figures(self) -> dict:
        io = self.store.take()
        out = {"offload_load_bytes": io["load_bytes"], "offload_store_bytes": io["store_bytes"],
               "offload_kept_bytes": 0, "recompute_time": 0.0, "accumulate_time": io["accumulate_seconds"],
               "host_io_time": io["load_seconds"] + io["store_seconds"]}
        if self.schedule is not None:
            out["offload_kept_bytes"] = self.schedule.kept_bytes
            out["recompute_time"] = self.schedule.recompute_seconds
            self.schedule.kept_bytes, self.schedule.recompute_seconds = 0, 0.0
        peak = memory.peaks_since_restart(self.device)
        if self.device.type != "cuda":  # resident memory: what setup left is not the fast tier's
            peak = max(0.0, peak - self._baseline_rss * 2**20)
        out["fast_peak_bytes_max"] = peak
        return out

    def report(self, epoch_time, peaks):
        passes = dict(self._passes)
        out = super().report(epoch_time, peaks)
        base, inter = ((passes["train"] * train + passes["eval"] * evaluate)
                       for train, evaluate in (self._loads["none"], self._loads["inter"]))
        out["offload_baseline_load_bytes"] = base
        out.update(costs.savings(out["offload_load_bytes"], base, inter, self.dedup))
        out.update(self._plan_figures)
        self._passes = {"train": 0, "eval": 0}
        memory.restart_peaks(self.device)  # the next epoch's peak is its own
        return out

    def report_lines(self, extra: dict) -> list:
        lines = super().report_lines(extra)
        lines.append(f"offload: host->fast {extra['offload_load_bytes'] / 2**20:.2f} MiB "
                     f"(no dedup: {extra['offload_baseline_load_bytes'] / 2**20:.2f} MiB, saved "
                     f"{extra['dedup_saving_pct']:.1f}%: inter {extra['dedup_inter_pct']:.1f}%, intra "
                     f"{extra['dedup_intra_pct']:.1f}%), fast->host {extra['offload_store_bytes'] / 2**20:.2f} MiB, "
                     f"kept {extra['offload_kept_bytes'] / 2**20:.2f} MiB, alpha {extra['replication']:.2f}, "
                     f"{extra['chunks']} chunks, fast-tier peak {extra['fast_peak_bytes_max'] / 2**20:.1f} MiB "
                     f"of {extra['budget_bytes'] / 2**20:.0f} MiB")
        return lines


def make_plan(adj, owned: list, rank: int, in_dim: int, stages: list, classes: int, heads: int, budget: int,
              chunks: Optional[int], dedup: str, reorganize: bool, reserved: int = 0) -> Chunking:
    """The plan of every rank (owning the ids ``owned[r]``) for ``stages``: ``chunks`` per
    rank, refused if its estimated footprint, plus ``reserved`` bytes the fast tier holds
    beside it, exceeds ``budget`` bytes, or (None) the smallest K whose estimate fits."""
    def plan(k, reorganized=reorganize):
        return Chunking(adj, owned, k, dedup, reorganized, rank, in_dim)

    def need(chunking):
        return reserved + max(costs.footprint(chunking, stages, classes, heads))

    if chunks is not None:
        chosen = plan(chunks)
        needed = need(chosen)
        if needed > budget:
            raise ConfigError(f"config field 'device_memory': {format_bytes(budget)} is too small for {chunks} chunks "
                              f"per rank (their largest needs about {format_bytes(needed)}); give at least "
                              f"{format_bytes(needed)}, or more chunks (--chunks auto)")
        return chosen
    floor = reserved + costs.footprint_floor(adj, owned, stages, classes, heads, in_dim, dedup)
    if floor > budget:
        raise ConfigError(f"config field 'device_memory': {format_bytes(budget)} is too small even for chunks of "
                          f"one row; give at least {format_bytes(floor)}")
    # Doubling, then bisecting, over plans in chunk order; the reorganized plan of the chosen
    # K is kept if it fits as well.
    rows = max(len(ids) for ids in owned)
    fits = {}

    def fitting(k):
        fits[k] = plan(k, False)
        return need(fits[k]) <= budget

    k = 1
    while not fitting(k):
        if k >= rows:
            raise ConfigError(f"config field 'device_memory': {format_bytes(budget)} is too small for this graph; "
                              f"give at least {format_bytes(need(fits[k]))}")
        k = min(2 * k, rows)
    low = k // 2 + 1
    while low < k:  # the smallest fitting K lies in (k/2, k]
        mid = (low + k) // 2
        if fitting(mid):
            k = mid
        else:
            low = mid + 1
    if reorganize and k > 1:
        chosen = plan(k)
        if need(chosen) <= budget:
            return chosen
    return fits[k]
