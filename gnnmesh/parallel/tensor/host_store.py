"""Tensor parallelism with the vertex data in the host tier (NeutronTP §4.2):
``--strategy tensor --host-store ram|file``.

As in memory (``parallel/tensor.py``), a decoupled model's NN transform runs on row blocks
and its propagation on column slices, but no vertex data stays in the fast tier: the
features (rows), H_0 and every propagation step (this rank's columns of all V rows) and
their gradients live in the host store. The transform streams the rank's rows through the
fast tier a row chunk at a time, each chunk switched to columns as soon as it is made (every
rank takes its i-th chunk in the same step, so the all-to-alls pair up). The propagation is
the out-of-core pipeline (``offload.pipeline``) over the rank's column slice, chunked by
destinations, rows shared by consecutive chunks kept in place. A column slice needs no other
rank's rows, so that pipeline runs alone on each rank; the layout switches are the only
exchanges. The host store, the plan within the budget and the report are the host tier's
(``offload.host_tier.HostTier``), which 1D out-of-core training uses as well.
Backward mirrors it: the logits' gradient is split to columns, the propagation's backward
sums H_0's gradient in the host tier, and each row chunk gathers its rows of it and
recomputes the transform.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import numpy as np
import torch

from ... import memory
from ...errors import ConfigError
from ...layout import ParallelLayout
from ...layout.ranges import even_bounds
from ...models import Decoupled
from ...validate import format_bytes
from ...view import GraphView
from ..offload.host_tier import HostTier, HostTierStrategy, PipelinePasses
from ..offload.pipeline import FEATURES, grad_table
from ..offload.plan import FLOAT, BudgetTooSmall, epoch_traffic, fixed_bytes, footprint, row_footprint, trained_params
from .layout_switch import LayoutSwitch

ROWS = "x"  # the features, this rank's row block
REFUSED_MODELS = ("--strategy tensor with --host-store trains decoupled models without attention (--decoupled "
                  "with gcn or sage), whose propagation runs on column slices; for other models out of core "
                  "use --strategy offload")


class _Alone:
    """The communicator of a pipeline that runs on one rank's column slice by itself."""

    rank, world_size = 0, 1


class _RowsView(GraphView):
    """Global rows ``lo:hi``: what the transform's dropout masks are keyed by."""

    operators_on_device = False

    def __init__(self, adj, lo: int, hi: int, seed: int, device):
        super().__init__(adj, seed=seed, device=device)
        self.lo, self.hi = lo, hi

    @property
    def num_nodes(self) -> int:
        return self.hi - self.lo

    def rows(self):
        return range(self.lo, self.hi)


class _TensorPasses:
    """One rank's passes: the transform over row chunks, the propagation over column chunks."""

    def __init__(self, strategy: "TensorOffload", transform, propagates: bool, columns: Optional[PipelinePasses],
                 steps: int):
        """``propagates``: the model has propagation steps; ``columns`` runs them on this
        rank's column slice (None where the slice is empty: fewer classes than ranks)."""
        self.transform, self.propagates, self.columns = transform, propagates, columns
        sw = strategy.switch
        self.switch, self.store, self.device = sw, strategy.host.store, strategy.device
        # Row chunk i of every rank, global ids lo:hi: the i-th step's split and gather.
        cuts = [[a + c for c in even_bounds(b - a, steps)] for a, b in zip(sw.row_bounds[:-1], sw.row_bounds[1:])]
        self.bounds = [[(c[i], c[i + 1]) for c in cuts] for i in range(steps)]
        self.steps = [[torch.arange(lo, hi) for lo, hi in step] for step in self.bounds]
        self.row_views = [_RowsView(strategy.adj, *step[sw.rank], strategy.mask_seed, self.device)
                          for step in self.bounds]
        self.classes = transform.width
        self.col_width = sw.col_width(self.classes)

    def _release(self) -> None:
        """On CPU the budget is resident memory: hand a row chunk's freed buffers back, or the
        allocator keeps them and the next chunk's take fresh pages (measured: 100-150 MiB over
        a 320 MiB budget on R-MAT 1M without it, at 10-15% of the epoch time with it)."""
        if self.device.type == "cpu":
            memory.release_freed()

    def _local(self, view) -> range:
        return range(view.lo - self.switch.start, view.hi - self.switch.start)

    def _transform(self, i: int, epoch: int) -> tuple:
        view = self.row_views[i]
        view.set_epoch(epoch, 0)  # the transform makes the epoch's first draws
        return view, self.store.read(ROWS, self._local(view))

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        sw = self.switch
        logits = None if self.propagates else torch.empty((sw.num_owned, self.classes), device=self.device)
        for i, (rows, bounds) in enumerate(zip(self.steps, self.bounds)):
            view, x = self._transform(i, epoch)
            with torch.no_grad():
                h0 = self.transform.run(view, x)
            del x
            if not self.propagates:  # H_0 is the logits
                logits[self._local(view)] = h0
                continue
            self._release()
            with sw.comm.phase("layout"):
                pieces = sw.finish_split(sw.start_split(h0, rows, first=view.lo))
            if self.columns is not None:
                for (lo, hi), piece in zip(bounds, pieces.split([hi - lo for lo, hi in bounds])):
                    self.store.write(FEATURES, range(lo, hi), piece)
        if not self.propagates:
            return logits
        cols = (self.columns.forward(epoch, training) if self.columns is not None
                else torch.empty((sw.num_nodes, 0), device=self.device))
        self._release()
        everyone = sw.owned_in(0, sw.num_nodes)
        with sw.comm.phase("layout"):
            return sw.finish_gather(sw.start_gather(cols, everyone, self.classes))

    def backward(self, epoch: int, grad_logits: torch.Tensor, params: list) -> list:
        sw = self.switch
        grads = [torch.zeros_like(p) for p in params]
        self._release()  # what the forward pass and the loss freed
        if self.propagates:
            everyone = sw.owned_in(0, sw.num_nodes)
            with sw.comm.phase("layout"):
                grad_cols = sw.finish_split(sw.start_split(grad_logits, everyone))
            if self.columns is not None:
                self.columns.backward(epoch, grad_cols, [])  # sums H_0's gradient
            del grad_cols
            self._release()
        for i, (rows, bounds) in enumerate(zip(self.steps, self.bounds)):
            view = self.row_views[i]
            if not self.propagates:
                grad_h0 = grad_logits[self._local(view)]
            else:
                mine = [self.store.read(grad_table(FEATURES), range(lo, hi)) if self.columns is not None
                        else torch.empty((hi - lo, self.col_width), device=self.device) for lo, hi in bounds]
                with sw.comm.phase("layout"):
                    grad_h0 = sw.finish_gather(sw.start_gather(torch.cat(mine), rows, self.classes))
            view, x = self._transform(i, epoch)
            with torch.enable_grad():
                h0 = self.transform.run(view, x)
                found = torch.autograd.grad(h0, params, grad_h0, allow_unused=True)
            for acc, g in zip(grads, found):
                if g is not None:
                    acc += g
            del found, h0, x
            self._release()
        return grads


class TensorOffload(HostTierStrategy):
    """Tensor parallelism whose vertex data lives in the host store (decoupled models)."""

    name = "tensor"
    reported_phases = ("layout",)

    def __init__(self, layout: ParallelLayout, device, device_memory: int, host_store: str = "ram",
                 store_dir: Optional[str] = None, chunks: Optional[int] = None, intermediates: str = "auto",
                 dedup: str = "both", reorganize: bool = True, overlap: Optional[bool] = None):
        """``chunks``: column chunks, or None to take the fewest whose estimated footprint fits
        ``device_memory`` (bytes)."""
        super().__init__(layout, device, "cols")
        self.host = HostTier(self.comm, self.device, device_memory, host_store, store_dir, chunks, intermediates,
                             dedup, reorganize, overlap)
        self.pipeline = self.passes = None

    def describe(self) -> str:
        kind, budget = self.host.store.kind, self.host.budget
        if self.passes is None:
            return f"tensor ({self.world_size} ranks, {kind} host store)"
        plan = self.pipeline.plan if self.pipeline is not None else None
        cols = f", {plan.k} column chunks" if plan is not None else ""
        return (f"tensor ({self.world_size} ranks, {kind} host store, {len(self.passes.steps)} row "
                f"chunks{cols}, budget {budget / 2**20:.0f} MiB)")

    def rank_data(self, graph, x, seed, device):
        if self.world_size > graph.num_nodes:
            raise ConfigError(f"{self.world_size} ranks for a graph of {graph.num_nodes} nodes: "
                              "every rank needs at least one node")
        self.switch = LayoutSwitch(self.comm, graph.num_nodes)
        self.adj, self.mask_seed, self.in_dim = graph.adj, seed, x.shape[1]
        rows = slice(self.switch.start, self.switch.stop)
        return self.host.rank_data(graph, ROWS, x[rows], rows, torch.arange(self.switch.start, self.switch.stop),
                               seed, device)

    def prepare(self, model) -> None:
        if not isinstance(model, Decoupled) or model.attention:
            raise ConfigError(REFUSED_MODELS)
        host = self.host
        stages = host.stages(model, self.in_dim)
        transform, propagation = stages[0], stages[1:]
        classes, sw, budget = transform.width, self.switch, host.budget
        # The logits stay beside every pass, and the loss's backward (the logits' gradient, the
        # softmax it saved) beside the backward pass: about four times the logits, as offload's;
        # beside them, what the fast tier holds whatever the chunks (``offload.plan.fixed_bytes``).
        row_logits = 4 * max(sw.row_counts) * classes * FLOAT
        params = trained_params(model)
        beside = row_logits + fixed_bytes(params)
        room = budget - beside
        widest = max([self.in_dim] + [lin.out_features for lin in model.mlp])
        per_row = row_footprint(self.in_dim, widest, classes)
        cols = sw.col_width(classes)
        self.columns = [replace(s, inputs=tuple(FEATURES if n == transform.output else n for n in s.inputs),
                                width=cols) for s in propagation]
        columns, plan, plan_need = None, None, 0
        # The propagation's output over every row (this rank's columns) and its gradient stay
        # beside its chunks: its pipeline hands over the whole output, not a chunk at a time.
        column_output = 2 * sw.num_nodes * cols * FLOAT
        if self.columns and cols:
            everything = [np.arange(sw.num_nodes)]
            try:
                plan = host.plan(self.adj, everything, 0, cols, self.columns, cols, 1,
                                 reserved=row_logits + column_output, params=params)
            except BudgetTooSmall as err:  # the smallest budget both the plan and the rows accept
                raise BudgetTooSmall(f"config field 'device_memory': {format_bytes(budget)} is too small for "
                                     f"the propagation's column chunks; give at least "
                                     f"{format_bytes(max(err.least, beside + per_row))}",
                                     max(err.least, beside + per_row)) from None
        # Rank 0's column slice is the widest: the budget it accepts, every rank accepts.
        if room < per_row:
            raise BudgetTooSmall(f"config field 'device_memory': {format_bytes(budget)} is too small for the "
                                 f"logits and one row; give at least {format_bytes(beside + per_row)}",
                                 beside + per_row)
        steps = max(1, math.ceil(max(sw.row_counts) / (room // per_row)))  # chunks of room // per_row rows at most
        if plan is not None:
            host.store.create(FEATURES, sw.num_nodes, cols)
            columns = host.run(self.adj, plan, self.columns, _Alone(), 0, self.mask_seed, input_grad=True)
            plan_need = column_output + max(footprint(plan, self.columns, cols))
        self.pipeline = host.pipeline
        self.passes = _TensorPasses(self, transform, bool(self.columns), columns, steps)
        rows_need = fixed_bytes(params) + math.ceil(max(sw.row_counts) / steps) * per_row
        host.count_baselines(self.pass_traffic)
        host.plan_figures = {"replication": round(plan.replication(), 4) if plan else 1.0,
                             "chunks": plan.k if plan else 0, "row_chunks": steps, "budget_bytes": budget,
                             "host_tier_bytes": host.host_bytes(),
                             "footprint_estimate_bytes": row_logits + max(plan_need, rows_need)}

    def pass_traffic(self, mode: str) -> dict:
        """As ``Offload.pass_traffic``: the propagation's traffic, and the transform's: its rows
        read forward and again to recompute, H_0's columns written, its gradient read back."""
        x_rows = self.switch.num_owned * self.in_dim * FLOAT
        load, store = [2 * x_rows, x_rows], [0, 0]
        if self.pipeline is not None:
            plan = self.pipeline.plan
            h0 = plan.rows * plan.in_dim * FLOAT
            for i, passes in enumerate(((1, 0), (0, 1))):
                t = epoch_traffic(plan, self.columns, *passes, mode=mode, input_grad=True)
                load[i] += t.total("load") + (h0 if i == 0 else 0)
                store[i] += t.total("store") + h0
        # Summed over ranks, as the counters are (the ranks' column slices differ).
        load, store = (tuple(map(sum, zip(*self.comm.all_gather_object(tuple(v))))) for v in (load, store))
        return {"load": load, "store": store}
