"""A model as the stages out-of-core training runs one at a time over all chunks.

A stage maps host-tier tables to one output table, a destination row at a time: a layer of
a layer stack (input H_l at the chunk's loaded rows, its dropout applied as H_l is written),
or a decoupled model's transform
(features at the destinations) and each propagation step (H_k at the loaded rows, H_0 as
well). A stage with a ``split`` is "fixed aggregation, then update" (HongTu §4.2): its
aggregates can be cached in the host tier so that the backward pass recomputes only the update.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from typing import Callable, Optional

import torch

from ...errors import ConfigError
from ...models import Decoupled
from ...models.base import SELF, GraphLayer, LayerStack, aggregate

INTERMEDIATES = ("auto", "recompute", "cache")


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
