"""The pipeline: a model as the stages out-of-core training runs one at a time over all
chunks, and a plan run over them (HongTu §4.3, Algorithm 1), stage by stage, batch by batch.

A stage maps host-tier tables to one output table, a destination row at a time: a layer of
a layer stack (input H_l at the chunk's loaded rows, its dropout applied as H_l is written),
or a decoupled model's transform
(features at the destinations) and each propagation step (H_k at the loaded rows, H_0 as
well). A stage with a ``split`` is "fixed aggregation, then update" (HongTu §4.2): its
aggregates can be cached in the host tier so that the backward pass recomputes only the update.

Forward: for every chunk, load the stage's input rows (through ``transfers``), compute the
destinations' output, write it to the host tier and let it go. Backward, from the last
stage: reload the chunk's inputs (or its cached aggregates), recompute the stage with
autograd, and push the input rows' gradients back where the host tier sums them into their
owners' rows. Parameter gradients are summed over chunks in a fixed order.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from functools import reduce
from typing import Callable, Optional

import torch

from ...errors import ConfigError
from ...models import Decoupled
from ...models.base import SELF, GraphLayer, LayerStack, aggregate
from .transfers import Overlap

FEATURES = "h0"
DROPPED_FEATURES = "h0.dropped"  # the features with the first layer's dropout, rewritten every epoch
DROP_PIECE = 1 << 18  # values masked at once by the features' dropout pass (``plan.footprint`` prices it)
INTERMEDIATES = ("auto", "recompute", "cache")


# -- a model as stages --------------------------------------------------------------------------


@dataclass
class Split:
    """A stage as ``update(aggregate(view, h))``: ``aggregate`` is linear in ``h`` and holds no
    parameter, so its outputs (``widths``, one per aggregate) are all backward needs of it."""

    aggregate: Callable
    update: Callable
    widths: tuple


@dataclass
class Stage:
    inputs: tuple          # table names read
    wide: tuple            # per input: read at the chunk's loaded rows (else its destinations)
    output: str            # table written (the last stage's output is the logits)
    width: int             # of the output
    run: Callable          # (view, *inputs) -> output rows of the chunk's destinations
    draws_after: Optional[int]  # the stage whose draws this one follows (None: the epoch's first)
    split: Optional[Split] = None
    cached: bool = False   # keep ``split``'s aggregates in the host tier
    operators: tuple = ()  # the graph operators it multiplies with
    # Dropout on the (one, wide) input in training, outside ``run``: applied once per row as
    # the table is written (by the stage before, or a pass over the features), so that rows
    # loaded by many chunks are not masked once per chunk. Its draw precedes the stage's own.
    input_dropout: float = 0.0


def table(index: int) -> str:
    return f"h{index}"


def stages_of(model: torch.nn.Module, in_dim: int, intermediates: str = "auto") -> list:
    """The stages of ``model`` (a layer stack or a decoupled model), its input table ``h0``
    being ``in_dim`` wide. ``intermediates``: cache the aggregates of layers that allow it
    (``auto``, ``cache``) or recompute every layer in the backward pass."""
    if isinstance(model, Decoupled):
        if intermediates == "cache":
            raise ConfigError("config field 'intermediates': a decoupled model is recomputed "
                              "(its propagation is not a fixed aggregation); use auto or recompute")
        return _decoupled(model, in_dim)
    if isinstance(model, LayerStack):
        splittable = all(isinstance(layer, GraphLayer) for layer in model.layers)
        if intermediates == "cache" and not splittable:
            raise ConfigError("config field 'intermediates': only gcn, sage and gin layers are a fixed "
                              "aggregation then an update; use auto or recompute")
        return _layer_stack(model, in_dim, cache=splittable and intermediates != "recompute")
    raise ConfigError(f"the offload strategy cannot split {type(model).__name__} into stages")


def _layer_stack(model: LayerStack, in_dim: int, cache: bool) -> list:
    """A stage per layer; a layer whose linear map narrows its rows (``_narrowing``) is two:
    the map applied row by row to the layer's input, then the rest on the narrow rows, so
    that chunks load their neighbours' rows at the narrow width (in-memory training takes
    the same order, ``models.base.propagate_linear``)."""
    out, width, previous = [], in_dim, None
    last = len(model.layers) - 1
    for i, layer in enumerate(model.layers):
        finish = (lambda h: h) if i == last else model.activation
        source, output = table(i), table(i + 1)
        operators = _operators(layer)
        narrowing = _narrowing(layer, width)
        if narrowing is not None:
            project, rest, split, projected = narrowing
            narrow = f"{source}.projected"
            out.append(Stage((source,), (False,), narrow, projected, lambda view, h, project=project: project(h),
                             previous, input_dropout=model.dropout))
            out.append(Stage((narrow,), (True,), output, layer.out_features,
                             lambda view, z, rest=rest, finish=finish: finish(rest(view, z)), len(out) - 1,
                             _finished(split, finish), cached=cache and split is not None, operators=operators))
        else:
            def run(view, h, layer=layer, finish=finish):
                return finish(layer(view, h))

            split = None
            if isinstance(layer, GraphLayer):
                split = Split(lambda view, h, layer=layer: layer.maths().aggregates(view, h),
                              lambda aggs, layer=layer: layer.maths().update(aggs),
                              (width,) * len(layer.maths().terms))
            out.append(Stage((source,), (True,), output, layer.out_features, run, previous,
                             _finished(split, finish), cached=cache and split is not None, operators=operators,
                             input_dropout=model.dropout))
        previous, width = len(out) - 1, layer.out_features
    return out


def _operators(layer) -> tuple:
    """The graph operators a layer multiplies with: a graph layer's terms', or those another
    layer (GAT's) says it uses."""
    if isinstance(layer, GraphLayer):
        return tuple(dict.fromkeys(t.op for t in layer.maths().terms if t.op != SELF))
    return tuple(getattr(layer, "operators", ("loop",)))


def _finished(split: Optional[Split], finish: Callable) -> Optional[Split]:
    """``split`` with the activation after the layer applied by its update."""
    if split is None:
        return None
    return Split(split.aggregate, lambda aggs, update=split.update: finish(update(aggs)), split.widths)


def _narrowing(layer, width_in: int):
    """``(project, rest, split, width)`` for a layer that starts with row-wise linear maps to
    narrower rows than its input's ``width_in``: ``project(h)`` applies them (``width`` wide),
    ``rest(view, z)`` does the layer's remaining work on projected rows; ``split`` is the
    rest as a fixed aggregation then an update, where it is one (None otherwise). None for
    a layer that does not narrow, or does not start so."""
    if isinstance(layer, GraphLayer):
        widths = [w.shape[0] for w, _ in layer.maths().by_weight()]
        if sum(widths) >= width_in:
            return None

        def project(h):
            return torch.cat([h @ w.t() for w, _ in layer.maths().by_weight()], dim=1)

        def aggregated(maths, view, z) -> list:
            """Every term's aggregate of its linear map's projected columns, in term order."""
            out, start = [None] * len(maths.terms), 0
            for (_, terms), n in zip(maths.by_weight(), widths):
                for t in terms:
                    out[maths.terms.index(t)] = aggregate(view, t.op, z[:, start:start + n])
                start += n
            return out

        def rest(view, z):
            maths = layer.maths()
            return maths.finish(_summed(maths, aggregated(maths, view, z)))

        def update(aggs):
            maths = layer.maths()
            return maths.finish(_summed(maths, aggs))

        maths = layer.maths()
        term_widths = [0] * len(maths.terms)
        for (_, terms), n in zip(maths.by_weight(), widths):
            for t in terms:
                term_widths[maths.terms.index(t)] = n
        split = Split(lambda view, z: aggregated(layer.maths(), view, z), update, tuple(term_widths))
        return project, rest, split, sum(widths)
    if hasattr(layer, "project") and getattr(layer, "projected_features", width_in) < width_in:
        return layer.project, layer.attend, None, layer.projected_features
    return None


def _summed(maths, aggregates: list) -> torch.Tensor:
    """The layer's summed terms from the terms' aggregates of their projected rows (in term
    order), summed as ``Maths.linear`` sums them: terms within a linear map, then the maps."""
    return reduce(operator.add, (reduce(operator.add, (t.scaled(aggregates[maths.terms.index(t)]) for t in terms))
                                 for _, terms in maths.by_weight()))


def _decoupled(model: Decoupled, in_dim: int) -> list:
    classes = model.mlp[-1].out_features
    stages = [Stage((table(0),), (False,), "p0", classes, lambda view, x: model.transform(view, x), None)]
    for step in range(model.k):
        def run(view, h, h0):
            weights = model.edge_weights(view, h0)
            return model.combine(view.spmm(h, model.op, weights), view.destinations(h0))

        previous = "p0" if step == 0 else f"p{step}"
        stages.append(Stage((previous, "p0"), (True, True), f"p{step + 1}", classes, run, 0,
                            operators=(model.op,)))
    if not model.attention:  # H_0 is needed at the destinations only
        for stage in stages[1:]:
            stage.wide = (True, False)
            stage.run = (lambda view, h, h0: model.combine(view.spmm(h, model.op), h0))
    return stages


# -- a plan run over the stages -----------------------------------------------------------------


def grad_table(name: str) -> str:
    return "grad." + name


def cache_table(stage: int, term: int) -> str:
    return f"cache{stage}.{term}"


def tables(stages: list, in_dim: int, input_grad: bool = False) -> dict:
    """``{name: width}`` of the host-tier tables a run over ``stages`` creates besides the
    features: the masked features, every stage's output and its gradient, cached aggregates,
    and with ``input_grad`` the features' gradient."""
    out = {grad_table(FEATURES): in_dim} if input_grad else {}
    if stages[0].input_dropout > 0 and stages[0].inputs[0] == FEATURES:
        out[DROPPED_FEATURES] = in_dim
    for stage in stages[:-1]:
        out[stage.output] = out[grad_table(stage.output)] = stage.width
    for i, stage in enumerate(stages):
        if stage.cached:
            out.update({cache_table(i, t): width for t, width in enumerate(stage.split.widths)})
    return out


class Loader:
    """Loads one table's rows for a sequence of batches (one pass over them), keeping what
    the next batch reuses: ``fetch(b)`` reads batch b's rows from the host tier (what may run
    a batch ahead), ``load(b, fetched)`` adds the rows kept in place and other ranks' rows."""

    def __init__(self, run, name: str, width: int, steps: list):
        self.run, self.name, self.width, self.steps = run, name, width, steps
        self.buffer = self.input = None

    def fetch(self, b: int) -> tuple:
        """(batch b's step, its buffer with the rows read from the host tier in place)."""
        run = self.run
        step = run.on_device(self.steps[b][run.rank])
        if step.read_whole:  # the buffer is one read, in order
            return step, run.store.read(self.name, step.reads[0])
        buffer = torch.empty((step.buffer_rows, self.width), device=run.device)
        for rows, where in step.segments():
            buffer.index_copy_(0, where, run.store.read(self.name, rows))
        return step, buffer

    def load(self, b: int, fetched: tuple) -> torch.Tensor:
        run, me = self.run, self.run.rank
        step, buffer = fetched
        if not step.read_whole:
            if len(step.keep[0]):
                buffer.index_copy_(0, step.keep[1], self.buffer.index_select(0, step.keep[0]))
                run.count_kept(len(step.keep[0]), self.width)
        arrived = run.exchange({q: buffer.index_select(0, idx) for q, idx in enumerate(step.send) if q != me},
                               [len(p) for p in step.place], self.width)
        if step.identity:  # this rank's own rows are the whole input, in order
            rows = buffer
        else:
            rows = torch.empty((step.input_rows, self.width), device=run.device)
            rows.index_copy_(0, step.place[me], buffer.index_select(0, step.send[me]))
            for p, piece in arrived.items():
                rows.index_copy_(0, step.place[p], piece)
            if len(step.input_keep[0]):
                rows.index_copy_(0, step.input_keep[1], self.input.index_select(0, step.input_keep[0]))
                run.count_kept(len(step.input_keep[0]), self.width)
        following = self.steps[b + 1][me] if b + 1 < len(self.steps) else None
        self.buffer = buffer if following is not None and _keeps(following, "keep") else None
        self.input = rows if following is not None and _keeps(following, "input_keep") else None
        return rows


class Pusher:
    """The adjoint of a Loader's pass, run over its batches in reverse: pushes the gradients
    of a batch's loaded rows to their owners, who add them up and accumulate them into the
    host tier, or carry rows the batch before had loaded as well."""

    def __init__(self, run, name: str, width: int, steps: list):
        self.run, self.name, self.width, self.steps = run, name, width, steps
        self.carry_buffer = self.carry_input = None

    def push(self, b: int, grad: torch.Tensor) -> None:
        run, me = self.run, self.run.rank
        step = run.on_device(self.steps[b][me])
        if self.carry_input is not None:
            grad = grad + self.carry_input
        arrived = run.exchange({p: grad.index_select(0, place) for p, place in enumerate(step.place) if p != me},
                               [len(s) for s in step.send], self.width)
        if step.identity and self.carry_buffer is None:
            buffer = grad
        else:
            buffer = (self.carry_buffer if self.carry_buffer is not None
                      else grad.new_zeros((step.buffer_rows, self.width)))
            buffer.index_add_(0, step.send[me], grad.index_select(0, step.place[me]))
        for q, piece in arrived.items():  # rank order: the sum is deterministic
            buffer.index_add_(0, step.send[q], piece)
        if step.read_whole:
            run.overlap.put(self.name, step.reads[0], buffer, add=True)
        else:
            for rows, where in step.segments():
                run.overlap.put(self.name, rows, buffer.index_select(0, where), add=True)
        self.carry_buffer = self.carry_input = None
        if len(step.keep[0]):
            self.carry_buffer = grad.new_zeros((self.steps[b - 1][me].buffer_rows, self.width))
            self.carry_buffer.index_copy_(0, step.keep[0], buffer.index_select(0, step.keep[1]))
            run.count_kept(len(step.keep[0]), self.width)
        if len(step.input_keep[0]):
            self.carry_input = grad.new_zeros((self.steps[b - 1][me].input_rows, self.width))
            self.carry_input.index_copy_(0, step.input_keep[0], grad.index_select(0, step.input_keep[1]))
            run.count_kept(len(step.input_keep[0]), self.width)


def _keeps(step, field: str) -> bool:
    return len(getattr(step, field)[0]) > 0


class Pipeline:
    """One rank's out-of-core passes over ``stages`` for a plan (chunks, batch order, steps).
    ``input_grad``: the backward pass also sums the gradient of the input table ``h0`` (when
    it is another computation's output, as H_0 is for tensor parallelism's propagation).
    With the plan's ``overlap``, batches fetch their loads one batch ahead and their results
    go back one batch behind (``transfers.Overlap``; on CUDA, on copy streams)."""

    def __init__(self, plan, stages: list, store, comm, device, input_grad: bool = False):
        self.plan, self.stages, self.store, self.comm = plan, stages, store, comm
        self.input_grad = input_grad
        self.rank, self.device = comm.rank, torch.device(device)
        self.overlap = Overlap(store, self.device, plan.overlap)
        self.kept_bytes = 0
        self.recompute_seconds = 0.0
        self._draws_end: dict = {}
        if self.device.type != "cpu":  # the steps wait in pinned memory; each batch copies its own in
            for steps in (plan.steps_forward, plan.steps_reverse):
                for row in steps:
                    row[self.rank] = row[self.rank].pinned()
        for name, width in tables(stages, plan.in_dim, input_grad).items():
            store.create(name, plan.rows, width)

    # -- moving rows ----------------------------------------------------------------------------
    def on_device(self, step):
        """``step`` with its index arrays where the rows are (a copy for this batch on a GPU)."""
        return step if self.device.type == "cpu" else step.to(self.device)

    def count_kept(self, rows: int, width: int) -> None:
        self.kept_bytes += rows * width * 4

    def exchange(self, pieces: dict, recv_rows: list, width: int) -> dict:
        """``pieces[q]`` to every other rank q; returns what each other rank sent here."""
        me, world = self.rank, self.comm.world_size
        if world == 1:
            return {}
        send = torch.cat([pieces[q].reshape(-1) for q in sorted(pieces)]
                         or [torch.empty(0, device=self.device)])
        send_counts = [0 if q == me else len(pieces[q]) * width for q in range(world)]
        recv_counts = [0 if p == me else n * width for p, n in enumerate(recv_rows)]
        with self.comm.phase("offload"):
            flat = self.comm.all_to_all(send, send_counts, recv_counts)
        return {p: t.view(-1, width) for p, t in enumerate(flat.split(recv_counts)) if p != me}

    def read_rows(self, name: str, chunk) -> torch.Tensor:
        return self.store.read(name, range(chunk.lo, chunk.hi))

    def fetch(self, loaders: dict, position: int, tables: list, chunk, view, operators) -> object:
        """What a batch, the ``position``-th of its loaders' pass, reads from the host tier:
        its loaders' rows, the rows of ``chunk``'s destinations in ``tables``, and the chunk's
        topology (``operators``' blocks); issued through the overlap (maybe a batch ahead)."""
        def load():
            return {"loaded": {name: loader.fetch(position) for name, loader in loaders.items()},
                    "rows": {name: self.read_rows(name, chunk) for name in tables},
                    "blocks": view.load(operators)}
        return self.overlap.fetch(load)

    def inputs(self, names: list, wide: tuple, loaders: dict, position: int, fetched: dict) -> list:
        """A stage's inputs (tables ``names``), the ``position``-th batch of its loaders' pass,
        from what was ``fetched`` for it (a table read twice, wide and at the destinations, is
        loaded once)."""
        loaded = {name: loader.load(position, fetched["loaded"][name]) for name, loader in loaders.items()}
        return [loaded[name] if w else fetched["rows"][name] for name, w in zip(names, wide)]

    # -- the passes -----------------------------------------------------------------------------
    def forward(self, views: list, epoch: int, training: bool, visit=None) -> Optional[torch.Tensor]:
        """Every stage over every batch; returns this rank's logits (the last stage's output),
        or with ``visit`` hands each chunk's logits to ``visit(logits, chunk)`` instead and
        returns None: then no tensor over all of the rank's rows is ever made."""
        plan, last = self.plan, len(self.stages) - 1
        logits = None
        for s, stage in enumerate(self.stages):
            start = self._draws_start(stage)
            dropping = training and stage.input_dropout > 0
            if dropping and stage.inputs[0] == FEATURES:
                self._drop_features(views, epoch, start, stage.input_dropout)
            names = self._loaded(stage, training)
            loaders = {name: Loader(self, name, self.width(name), plan.steps_forward)
                       for name, wide in zip(names, stage.wide) if wide}
            following = self.stages[s + 1] if s < last else None
            if s == last and visit is None:
                logits = torch.empty((plan.rows, stage.width), device=self.device)
            direct = [name for name, wide in zip(names, stage.wide) if not wide]

            def fetch(b):
                return self.fetch(loaders, b, direct, plan.chunk(self.rank, b), views[b], stage.operators)

            ahead = None
            for b in range(plan.batches):
                chunk, view = plan.chunk(self.rank, b), views[b]
                fetched = self.overlap.take(ahead if ahead is not None else fetch(b))
                view.set_epoch(epoch, start + dropping)  # the input's dropout drew first
                view.wide = any(stage.wide)
                inputs = self.inputs(names, stage.wide, loaders, b, fetched)
                del fetched
                with torch.no_grad():
                    if stage.cached and training:
                        aggregates = stage.split.aggregate(view, *inputs)
                        for t, agg in enumerate(aggregates):
                            self.overlap.put(cache_table(s, t), range(chunk.lo, chunk.hi), agg)
                        out = stage.split.update(aggregates)
                    else:
                        out = stage.run(view, *inputs)
                del inputs
                ahead = fetch(b + 1) if self.overlap.ahead and b + 1 < plan.batches else None
                view.release()
                self._draws_end[s] = view.draws
                if s == last:
                    if visit is None:
                        logits[chunk.lo:chunk.hi] = out
                    else:
                        visit(out, chunk)
                else:
                    if training and following.input_dropout > 0:  # the next stage's input, masked once
                        out = self._drop(view, epoch, view.draws, out, following.input_dropout)
                    self.overlap.put(stage.output, range(chunk.lo, chunk.hi), out)
                del out
                self.overlap.batch_done()
            self.overlap.settle()
        return logits

    def backward(self, views: list, epoch: int, grad_logits, params: list) -> list:
        """The parameters' gradients, given the logits' (the backward pass of ``forward``):
        ``grad_logits`` is the gradient of all of the rank's rows, or a function
        ``loss(logits, chunk)`` of a chunk's logits, a scalar whose gradient the chunk's is
        (a loss that is a sum of the chunks' terms)."""
        plan, last = self.plan, len(self.stages) - 1
        grads = [torch.zeros_like(p) for p in params]
        for stage in self.stages[:-1]:
            self.store.zero(grad_table(stage.output))
        if self.input_grad:
            self.store.zero(grad_table(FEATURES))
        for s in range(last, -1, -1):
            stage = self.stages[s]
            names = self._loaded(stage, True)
            needs = [name != FEATURES or self.input_grad for name in stage.inputs]
            recomputed = not stage.cached
            loaders = {name: Loader(self, name, self.width(name), plan.steps_reverse)
                       for name, wide in zip(names, stage.wide) if wide and recomputed}
            pushers = {name: Pusher(self, grad_table(name), self.width(name), plan.steps_forward)
                       for name, wide, need in zip(stage.inputs, stage.wide, needs) if wide and need}
            start = self._draws_start(stage)
            dropping = stage.input_dropout > 0
            following = self.stages[s + 1] if s < last else None
            tables = [name for name, wide in zip(names, stage.wide) if not wide and recomputed]
            tables += [] if s == last else [grad_table(stage.output)]
            tables += [cache_table(s, t) for t in range(len(stage.split.widths))] if not recomputed else []

            def fetch(b):
                return self.fetch(loaders, plan.batches - 1 - b, tables, plan.chunk(self.rank, b), views[b],
                                  stage.operators)

            ahead = None
            for b in range(plan.batches - 1, -1, -1):
                chunk, view = plan.chunk(self.rank, b), views[b]
                fetched = self.overlap.take(ahead if ahead is not None else fetch(b))
                if s == last:
                    grad_out = grad_logits if callable(grad_logits) else grad_logits[chunk.lo:chunk.hi]
                else:  # the gradient of the masked rows the next stage read, through the mask
                    grad_out = fetched["rows"][grad_table(stage.output)]
                    if following.input_dropout > 0:
                        grad_out = self._drop(view, epoch, self._draws_start(following), grad_out,
                                              following.input_dropout)
                view.wide = any(stage.wide)
                view.set_epoch(epoch, start + dropping)
                t0 = time.perf_counter()
                if recomputed:
                    inputs = [_leaf(t, need) for t, need in
                              zip(self.inputs(names, stage.wide, loaders, plan.batches - 1 - b, fetched), needs)]
                    with torch.enable_grad():
                        out = stage.run(view, *inputs)
                        wanted = [t for t in inputs if t.requires_grad]
                        found = _grad(out, grad_out, chunk, params + wanted)
                    input_grads = iter(found[len(params):])
                    input_grads = [next(input_grads) if t.requires_grad else None for t in inputs]
                else:
                    aggregates = [fetched["rows"][cache_table(s, t)] for t in range(len(stage.split.widths))]
                    input_grads, found = self._cached_backward(stage, view, chunk, aggregates, grad_out, params,
                                                               needs[0])
                del fetched
                self.recompute_seconds += time.perf_counter() - t0
                ahead = fetch(b - 1) if self.overlap.ahead and b > 0 else None
                view.release()
                for acc, g in zip(grads, found[:len(params)]):
                    if g is not None:
                        acc += g
                pushed: dict = {}
                for name, wide, g in zip(stage.inputs, stage.wide, input_grads):
                    if g is None:
                        continue
                    if wide:  # a table loaded once for two inputs gets their gradients' sum
                        pushed[name] = g if name not in pushed else pushed[name] + g
                    else:
                        self.overlap.put(grad_table(name), range(chunk.lo, chunk.hi), g, add=True)
                for name, g in pushed.items():
                    pushers[name].push(b, g)
                del input_grads, pushed, found
                self.overlap.batch_done()
            self.overlap.settle()
        first = self.stages[0]
        if self.input_grad and first.inputs[0] == FEATURES and first.input_dropout > 0:
            self._drop_feature_grads(views, epoch, self._draws_start(first), first.input_dropout)
        return grads

    def _loaded(self, stage: Stage, training: bool) -> list:
        """The tables a stage reads: in training, the masked features for a first layer with dropout."""
        dropped = training and stage.input_dropout > 0
        return [DROPPED_FEATURES if dropped and name == FEATURES else name for name in stage.inputs]

    def _drop(self, view, epoch: int, draws: int, rows: torch.Tensor, p: float) -> torch.Tensor:
        """Dropout (or, alike, its adjoint) on ``rows`` of the view's destinations, with the mask
        drawn after ``draws`` draws of the epoch."""
        view.set_epoch(epoch, draws)
        view.wide = False
        return view.dropout(rows, p, True)

    def _drop_features(self, views: list, epoch: int, draws: int, p: float) -> None:
        """The features masked for this epoch's first layer, a pass over this rank's rows in
        pieces of at most ``DROP_PIECE`` values (a mask depends only on the draw and the row's
        global id, so the pieces mask as the whole would)."""
        self._masked(FEATURES, DROPPED_FEATURES, views, epoch, draws, p)

    def _drop_feature_grads(self, views: list, epoch: int, draws: int, p: float) -> None:
        """The features' gradient through the first layer's dropout: what the backward pass
        summed is the masked features' gradient, and the mask (its own adjoint) takes it to the
        features'."""
        self._masked(grad_table(FEATURES), grad_table(FEATURES), views, epoch, draws, p)

    def _masked(self, source: str, target: str, views: list, epoch: int, draws: int, p: float) -> None:
        """Table ``target`` := the first layer's dropout mask of the epoch (after ``draws``
        draws) on table ``source``, over this rank's rows a piece at a time."""
        step = max(1, DROP_PIECE // self.plan.in_dim)
        for b in range(self.plan.batches):
            chunk, view = self.plan.chunk(self.rank, b), views[b]
            for lo in range(chunk.lo, chunk.hi, step):
                hi = min(lo + step, chunk.hi)
                ids = chunk.dst[lo - chunk.lo:hi - chunk.lo]
                view.set_epoch(epoch, draws)
                rows = view.dropout_block(self.store.read(source, range(lo, hi)), p, True, (self.plan.in_dim,),
                                          rows=ids)
                self.store.write(target, range(lo, hi), rows)

    def _cached_backward(self, stage, view, chunk, aggregates, grad_out, params, needs_input):
        """Backward of a cached stage: the update from its ``aggregates`` (read back from the
        host tier); the aggregation's adjoint (linear, parameter-free) gives the loaded rows'
        gradients without loading them."""
        aggregates = [agg.requires_grad_() for agg in aggregates]
        with torch.enable_grad():
            out = stage.split.update(aggregates)
            found = _grad(out, grad_out, chunk, params + aggregates)
        input_grad = None
        if needs_input:
            with torch.enable_grad():
                zero = torch.zeros((len(chunk.neighbours), self.width(stage.inputs[0])), device=self.device,
                                   requires_grad=True)
                again = stage.split.aggregate(view, zero)
                pairs = [(a, g) for a, g in zip(again, found[len(params):]) if g is not None]
                input_grad = torch.autograd.grad([a for a, _ in pairs], zero, [g for _, g in pairs])[0]
        return [input_grad], found

    # -- bookkeeping ----------------------------------------------------------------------------
    def width(self, name: str) -> int:
        if name in (FEATURES, DROPPED_FEATURES):
            return self.plan.in_dim
        return next(stage.width for stage in self.stages if stage.output == name)

    def _draws_start(self, stage: Stage) -> int:
        return 0 if stage.draws_after is None else self._draws_end.get(stage.draws_after, 0)


def _grad(out: torch.Tensor, grad_out, chunk, inputs: list) -> tuple:
    """The gradients of ``inputs`` given ``out``'s (``grad_out``), or, where ``grad_out`` is a
    function of the chunk's logits, of the scalar it gives."""
    if callable(grad_out):
        return torch.autograd.grad(grad_out(out, chunk), inputs, allow_unused=True)
    return torch.autograd.grad(out, inputs, grad_out, allow_unused=True)


def _leaf(t: torch.Tensor, needs_grad: bool) -> torch.Tensor:
    return t.detach().requires_grad_(needs_grad)
