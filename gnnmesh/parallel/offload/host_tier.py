"""The host tier: what every strategy whose vertex data lives out of core shares.

It lives in the out-of-core package because it is that package's machinery seen from a
strategy: 1D out-of-core training (``strategy.Offload``) and tensor parallelism with
``--host-store`` (``parallel.tensor.host_store.TensorOffload``) each hold one ``HostTier``
and use it; neither is the other. A ``HostTier`` holds

* the host store (``host_store``: RAM, or files, one folder per rank) and its tables,
* the fast tier's budget (``--device-memory``) and the plan settings within it: the chunks
  per rank (or the fewest that fit), the dedup mode, whether to reorganize, the
  intermediates (``build_plan``, ``stages_of``),
* the pipeline that runs a plan and the views of its chunks, wrapped as one autograd node
  (``forward``), and
* the counters and epoch figures of the transfers (``reset_counters``, ``rank_figures``,
  ``report``, ``report_line``).

``HostTierStrategy`` is the part of such a strategy that only hands its work to its tier.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from ... import memory
from ...comm import agreed
from ...host_store import HostStore, made_together
from ...ops.precision import autocast_as, current_autocast
from ...view import GraphView
from ..input_rows import InputRows
from ..strategy import RankData
from ..distributed import DistributedStrategy
from .chunk import chunk_views
from .pipeline import Pipeline, grad_table, stages_of
from .plan import Plan, build_plan, savings


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
    ``forward(epoch, training)`` and ``backward(epoch, grad_logits, params)``. The backward
    pass recomputes the forward's stages under the autocast the forward ran in (``--precision``)."""

    @staticmethod
    def forward(ctx, passes, epoch, *params):
        ctx.passes, ctx.epoch, ctx.params = passes, epoch, params
        ctx.autocast = current_autocast(params[0].device)
        return passes.forward(epoch, training=True)

    @staticmethod
    def backward(ctx, grad_logits):
        with autocast_as(ctx.autocast):
            grads = ctx.passes.backward(ctx.epoch, grad_logits.contiguous(), list(ctx.params))
        return (None, None, *grads)


class _OffloadedLoss(torch.autograd.Function):
    """A whole out-of-core training pass as one autograd node whose output is the loss: the
    chunks' terms ``loss_of(logits, rows)`` summed as they come (in float64), so that no
    tensor over all rows is made; backward differentiates each chunk's term in its turn."""

    @staticmethod
    def forward(ctx, passes, epoch, loss_of, *params):
        ctx.passes, ctx.epoch, ctx.loss_of, ctx.params = passes, epoch, loss_of, params
        ctx.autocast = current_autocast(params[0].device)
        total = []

        def visit(logits, chunk):
            term = loss_of(logits, slice(chunk.lo, chunk.hi)).detach().double()
            total.append(term if not total else total.pop() + term)

        passes.forward(epoch, training=True, visit=visit)
        return total[0].float() if total else torch.zeros((), device=params[0].device)

    @staticmethod
    def backward(ctx, grad_loss):
        def term(logits, chunk):
            return ctx.loss_of(logits, slice(chunk.lo, chunk.hi)) * grad_loss

        with autocast_as(ctx.autocast):  # the stages recomputed as the forward ran them
            return (None, None, None, *ctx.passes.backward(ctx.epoch, term, list(ctx.params)))


class PipelinePasses:
    """A pipeline's passes over the views of its plan's chunks (what ``HostTier.forward`` runs)."""

    chunked = True  # its logits can come chunk by chunk (``forward``'s ``visit``)

    def __init__(self, pipeline: Pipeline, views: list):
        self.pipeline, self.views = pipeline, views

    def forward(self, epoch: int, training: bool, visit=None) -> torch.Tensor:
        return self.pipeline.forward(self.views, epoch, training, visit)

    def backward(self, epoch: int, grad_logits, params: list) -> list:
        return self.pipeline.backward(self.views, epoch, grad_logits, params)


class HostTier:
    """One rank's host tier, talking over ``comm``, with a fast tier of ``device_memory``
    bytes on ``device``. ``chunks``: K, or None to take the smallest K whose estimated
    footprint fits. ``overlap``: transfers overlap compute (``transfers.Overlap``); None: on
    with CUDA, where copy streams hide them, off on the CPU, where nothing would."""

    def __init__(self, comm, device, device_memory: int, host_store: str = "ram", store_dir: Optional[str] = None,
                 chunks: Optional[int] = None, intermediates: str = "auto", dedup: str = "both",
                 reorganize: bool = True, overlap: Optional[bool] = None):
        self.comm, self.device = comm, torch.device(device)
        self.budget, self.chunks, self.intermediates = int(device_memory), chunks, intermediates
        self.dedup, self.reorganize = dedup, reorganize
        self.overlap = self.device.type == "cuda" if overlap is None else bool(overlap)
        where = None if store_dir is None else str(Path(store_dir) / f"rank{comm.rank}")
        shared = made_together(store_dir, comm) if host_store == "file" and store_dir else ()
        self.store = agreed(lambda: HostStore(host_store, self.device, where, shared=shared))  # refused early
        weakref.finalize(self, self.store.close)  # its files go when the run ends, however it ends
        self.pipeline: Optional[Pipeline] = None
        self._passes = {"train": 0, "eval": 0}
        self._baseline_rss = 0.0
        self.resident_bytes = 0  # what setup leaves in the fast tier for the run (on a GPU)
        self._loads: dict = {}
        self.plan_figures: dict = {}  # what every epoch reports of the plan

    # -- setup ----------------------------------------------------------------------------------
    def rank_data(self, graph, table: str, x: torch.Tensor, rows, ids: torch.Tensor, seed: int, device) -> RankData:
        """This rank's data with its features ``x`` in the host table ``table`` (its x
        is an empty stand-in): ``rows`` picks its labels and masks, ``ids`` are its global ids."""
        self.store.create(table, len(x), x.shape[1])
        self.store.write(table, range(len(x)), x)
        self.store.take()
        self.comm.take()
        view = OffloadView(graph.adj, ids, seed, device)
        pick = (lambda t: t[rows].to(device))
        data = RankData(view, torch.empty((len(x), 0)), pick(graph.y), pick(graph.train_mask),
                        pick(graph.val_mask), pick(graph.test_mask))
        if self.device.type == "cuda":  # labels and masks stay on the GPU, beside every chunk
            self.resident_bytes = sum(t.numel() * t.element_size()
                                      for t in (data.y, data.train_mask, data.val_mask, data.test_mask))
        return data

    def stages(self, model, in_dim: int) -> list:
        """``model`` as the stages the pipeline runs, with the tier's intermediates."""
        return stages_of(model, in_dim, self.intermediates)

    def plan(self, adj, owned: list, rank: int, in_dim: int, stages: list, classes: int, heads: int,
             reserved: int = 0, params: int = 0) -> Plan:
        """``build_plan`` with this tier's budget and settings, counted and cut down to this
        rank's steps now, before the budget's baseline. On CUDA the budget also holds cuBLAS's
        workspaces, one for the thread that runs the forward pass and one for autograd's, and
        its labels and masks; on the CPU the file store's own buffers."""
        reserved += 2 * memory.blas_workspace_bytes(self.device) + self.resident_bytes + self.store.working_bytes()
        plan = build_plan(adj=adj, owned=owned, rank=rank, in_dim=in_dim, stages=stages, classes=classes,
                          heads=heads, budget=self.budget, chunks=self.chunks, dedup=self.dedup,
                          reorganize=self.reorganize, reserved=reserved, params=params, overlap=self.overlap)
        plan.keep_own_steps()
        return plan

    def run(self, adj, plan: Plan, stages: list, comm, rank: int, seed: int,
            input_grad: bool = False) -> PipelinePasses:
        """The pipeline of ``stages`` over ``plan`` (kept for its counters), talking over
        ``comm``, and its passes over views of ``rank``'s chunks."""
        self.pipeline = Pipeline(plan, stages, self.store, comm, self.device, input_grad=input_grad)
        return PipelinePasses(self.pipeline, chunk_views(adj, plan, stages, rank, seed, self.device))

    def count_baselines(self, pass_traffic: Callable) -> None:
        """Keep the loads ``pass_traffic(mode)`` gives under the dedup modes the report
        compares with (none, inter): they do not change from epoch to epoch."""
        self._loads = {mode: pass_traffic(mode)["load"] for mode in ("none", "inter")}

    def host_bytes(self) -> int:
        """The host tier's bytes, all ranks'."""
        return sum(self.comm.all_gather_object(self.store.nbytes()))

    # -- training -------------------------------------------------------------------------------
    def forward(self, passes, model, epoch: int) -> torch.Tensor:
        """``passes`` over the epoch: one autograd node when training, else without gradients."""
        if torch.is_grad_enabled() and model.training:
            self._passes["train"] += 1
            params = [p for p in model.parameters() if p.requires_grad]
            return _Offloaded.apply(passes, epoch, *params)
        self._passes["eval"] += 1
        with torch.no_grad():
            return passes.forward(epoch, training=model.training)

    def train_loss(self, passes, model, epoch: int, loss_of) -> torch.Tensor:
        """The training loss from the chunks' logits, one chunk at a time (``_OffloadedLoss``)."""
        self._passes["train"] += 1
        params = [p for p in model.parameters() if p.requires_grad]
        return _OffloadedLoss.apply(passes, epoch, loss_of, *params)

    def evaluate_rows(self, passes, model, epoch: int, add) -> None:
        """``add(logits, rows)`` chunk by chunk, without gradients."""
        self._passes["eval"] += 1
        with torch.no_grad():
            passes.forward(epoch, training=model.training,
                           visit=lambda logits, chunk: add(logits, slice(chunk.lo, chunk.hi)))

    # -- reporting ------------------------------------------------------------------------------
    def reset_counters(self) -> None:
        self.store.take()
        self._passes = {"train": 0, "eval": 0}
        if self.pipeline is not None:
            self.pipeline.kept_bytes, self.pipeline.recompute_seconds = 0, 0.0
        # Setup is done: the topology and host tier are in place, the fast tier's use starts here,
        # from what setup holds (not what it freed).
        memory.release_freed(collect=True)
        self._baseline_rss = memory.restart_peaks(self.device)

    def rank_figures(self) -> dict:
        io = self.store.take()
        out = {"offload_load_bytes": io["load_bytes"], "offload_store_bytes": io["store_bytes"],
               "offload_kept_bytes": 0, "recompute_time": 0.0, "accumulate_time": io["accumulate_seconds"],
               "host_io_time": io["load_seconds"] + io["store_seconds"]}
        if self.pipeline is not None:
            out["offload_kept_bytes"] = self.pipeline.kept_bytes
            out["recompute_time"] = self.pipeline.recompute_seconds
            self.pipeline.kept_bytes, self.pipeline.recompute_seconds = 0, 0.0
        peak = memory.peaks_since_restart(self.device)
        if self.device.type != "cuda":  # resident memory: what setup left is not the fast tier's
            peak = max(0.0, peak - self._baseline_rss * 2**20)
        out["fast_peak_bytes_max"] = peak
        return out

    def report(self, out: dict) -> dict:
        """An epoch's report ``out`` (the strategy's, its ``rank_figures`` summed in) with the
        host tier's figures added."""
        passes = dict(self._passes)
        base, inter = ((passes["train"] * train + passes["eval"] * evaluate)
                       for train, evaluate in (self._loads["none"], self._loads["inter"]))
        out["offload_baseline_load_bytes"] = base
        out.update(savings(out["offload_load_bytes"], base, inter, self.dedup))
        out.update(self.plan_figures)
        self._passes = {"train": 0, "eval": 0}
        memory.restart_peaks(self.device)  # the next epoch's peak is its own
        return out

    def report_line(self, extra: dict) -> str:
        return (f"offload: host->fast {extra['offload_load_bytes'] / 2**20:.2f} MiB "
                f"(no dedup: {extra['offload_baseline_load_bytes'] / 2**20:.2f} MiB, saved "
                f"{extra['dedup_saving_pct']:.1f}%: inter {extra['dedup_inter_pct']:.1f}%, intra "
                f"{extra['dedup_intra_pct']:.1f}%), fast->host {extra['offload_store_bytes'] / 2**20:.2f} MiB, "
                f"kept {extra['offload_kept_bytes'] / 2**20:.2f} MiB, alpha {extra['replication']:.2f}, "
                f"{extra['chunks']} chunks, fast-tier peak {extra['fast_peak_bytes_max'] / 2**20:.1f} MiB "
                f"of {extra['budget_bytes'] / 2**20:.0f} MiB")


class HostRows(InputRows):
    """A rank's input rows in its host tier's table ``table`` (row ``i`` is node ``ids[i]``),
    with their gradient in the table a pipeline run with ``input_grad`` sums it into."""

    def __init__(self, store, table: str, ids: np.ndarray):
        self.store, self.table, self.ids = store, table, np.asarray(ids, dtype=np.int64)

    def read(self, positions, columns):
        return self.store.read(self.table, positions.numpy())[:, columns].cpu()

    def write(self, positions, columns, values):
        rows = self.store.read(self.table, positions.numpy())
        rows[:, columns] = values.to(rows.device)
        self.store.write(self.table, positions.numpy(), rows)

    def gradient(self, positions, columns):
        return self.store.read(grad_table(self.table), positions.numpy())[:, columns].cpu()


class HostTierStrategy(DistributedStrategy):
    """A strategy whose vertex data lives in its ``host`` (a ``HostTier``): the training pass,
    the counters and the report go to the tier. A subclass makes ``host`` and, in
    ``prepare``, ``passes`` (``forward(epoch, training)``, ``backward(epoch, grad, params)``)."""

    holds_memory_budget = True
    outputs_at_once = False  # the chunks' outputs come one at a time (``train_loss``, ``evaluate_rows``)
    host: HostTier
    passes = None

    def prepare(self, model) -> None:
        raise NotImplementedError

    def forward(self, model, view, x):
        if self.passes is None:
            self.prepare(model)
        return self.host.forward(self.passes, model, view.epoch)

    def train_loss(self, model, view, x, loss_of):
        if self.passes is None:
            self.prepare(model)
        if not getattr(self.passes, "chunked", False):
            return super().train_loss(model, view, x, loss_of)
        return self.host.train_loss(self.passes, model, view.epoch, loss_of)

    def evaluate_rows(self, model, view, x, add):
        if self.passes is None:
            self.prepare(model)
        if not getattr(self.passes, "chunked", False):
            return super().evaluate_rows(model, view, x, add)
        self.host.evaluate_rows(self.passes, model, view.epoch, add)

    def reset_counters(self) -> None:
        super().reset_counters()
        self.host.reset_counters()

    def rank_figures(self) -> dict:
        return self.host.rank_figures()

    def report(self, epoch_time, peaks):
        return self.host.report(super().report(epoch_time, peaks))

    def report_lines(self, extra: dict) -> list:
        return super().report_lines(extra) + [self.host.report_line(extra)]
