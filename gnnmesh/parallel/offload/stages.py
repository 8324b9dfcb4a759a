"""A model as the stages out-of-core training runs one at a time over all chunks.

A stage maps host-tier tables to one output table, a destination row at a time: a layer of
a layer stack (input H_l at the chunk's loaded rows, its dropout applied as H_l is written),
or a decoupled model's transform
(features at the destinations) and each propagation step (H_k at the loaded rows, H_0 as
well). A stage with a ``split`` is "fixed aggregation, then update" (HongTu §4.2): its
aggregates can be cached in the host tier so that the backward pass recomputes only the update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ...errors import ConfigError
from ...models import Decoupled
from ...models.base import SELF, GraphLayer, LayerStack

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
    out, width = [], in_dim
    last = len(model.layers) - 1
    for i, layer in enumerate(model.layers):
        finish = (lambda h: h) if i == last else model.activation

        def run(view, h, layer=layer, finish=finish):
            return finish(layer(view, h))

        split = None
        if isinstance(layer, GraphLayer):
            maths = layer.maths()
            split = Split(lambda view, h, layer=layer: layer.maths().aggregates(view, h),
                          lambda aggs, layer=layer, finish=finish: finish(layer.maths().update(aggs)),
                          (width,) * len(maths.terms))
            width_out = maths.out_features
            operators = tuple(dict.fromkeys(t.op for t in maths.terms if t.op != SELF))
        else:  # another layer (GAT's): the width it declares, the operators it says it uses
            width_out = layer.out_features
            operators = tuple(getattr(layer, "operators", ("loop",)))
        out.append(Stage((table(i),), (True,), table(i + 1), width_out, run, i - 1 if i else None,
                         split, cached=cache and split is not None, operators=operators,
                         input_dropout=model.dropout))
        width = width_out
    return out


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
