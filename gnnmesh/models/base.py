"""Shared structure: a stack of graph layers with activation and dropout between them, and
the one description of a graph layer's maths that every strategy evaluates."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce
from typing import Callable, Optional

import torch
from torch import nn

try:
    from ..ops import dense
except ImportError:  # the copy a PyG export ships runs without gnnmesh: torch's own ops, the same results
    from types import SimpleNamespace
    dense = SimpleNamespace(linear=lambda h, weight: h @ weight.t(), add=lambda a, b: a + b,
                            activation=lambda fn, h: fn(h))

# The operator name of the identity: a term on H itself, with no aggregation.
SELF = "self"
_RELU = (torch.relu, nn.functional.relu)  # the activations that may run in place (``torch.relu_``)


def layer_dims(in_dim: int, hidden: int, out_dim: int, layers: int) -> list[tuple[int, int]]:
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
    return list(zip(dims[:-1], dims[1:]))


class LayerStack(nn.Module):
    """``dropout -> layer -> activation`` repeated; the last layer has no activation.

    Subclasses fill ``self.layers`` with modules called as ``layer(view, h)``.
    """

    def __init__(self, dropout: float, activation=torch.relu):
        super().__init__()
        self.dropout = dropout
        self.activation = activation
        self.layers = nn.ModuleList()

    def forward(self, view, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """The stack from layer ``start`` on; ``x`` is the input features (``start`` 0) or
        layer ``start - 1``'s output before its activation (a strategy that computed the
        first layer its own way continues from there)."""
        h = x
        for i in range(start, len(self.layers)):
            if i > 0:
                h = dense.activation(self.activation, h)
            h = self.layer_output(view, i, h)
        return h

    def layer_output(self, view, i: int, h: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` (with the dropout before it) on its input ``h``."""
        at = view.layer(i)
        return self.layers[i](at, at.dropout(h, self.dropout, self.training))

    def reads_input_by_rows(self) -> bool:
        """Whether the stack's first use of its input is row by row: its first layer is a
        ``GraphLayer`` evaluated as its maths say, multiplying the input by its weights before
        aggregating (``Maths.projects_first``), after a dropout whose mask is drawn row by row
        (each row's from its global id: ``GraphView.dropout``). ``forward_by_blocks`` may then
        take the input a block of rows at a time, in training as in evaluation."""
        first = self.layers[0] if len(self.layers) else None
        return (isinstance(first, GraphLayer) and type(first).forward is GraphLayer.forward
                and type(self).forward is LayerStack.forward and type(self).layer_output is LayerStack.layer_output
                and first.maths().projects_first())

    def forward_by_blocks(self, view, blocks: Callable, rows: int) -> torch.Tensor:
        """``forward(view, x)`` of a stack that ``reads_input_by_rows``, ``x`` (``rows`` rows, no
        gradient of its own) given a block of rows at a time by ``blocks()``: the same
        products on the same operands, without the whole input in memory at once. In
        training the first layer's dropout is drawn a block at a time, and its weights'
        gradient is summed a block at a time in the backward pass, the blocks read again
        (``project_by_blocks``): neither the input nor its dropped copy is kept for it."""
        first = view.layer(0)
        drop = BlockDropout(first, self.dropout) if self.training and self.dropout > 0 else None
        h = self.layers[0].maths().evaluate_by_blocks(first, blocks, rows, drop)
        for i in range(1, len(self.layers)):
            # without gradients the first layer's output is this pass's own: its activation may
            # overwrite it (no second [rows, hidden] beside it); a later layer's may be anything
            # the layer returns, and a pass with gradients keeps the activation's input apart
            in_place = i == 1 and self.activation in _RELU and not torch.is_grad_enabled()
            h = torch.relu_(h) if in_place else dense.activation(self.activation, h)
            h = self.layer_output(view, i, h)
        return h


class BlockDropout:
    """A layer's dropout of its input drawn a block of rows at a time: the view's next draw,
    taken once, each block's mask that draw's rows (``GraphView.dropout_block``), so a block
    dropped again in the backward pass is dropped alike."""

    def __init__(self, view, p: float):
        self.view, self.p = view, p
        self.epoch, self.draw = view.epoch, view.draws
        view.set_epoch(self.epoch, self.draw + 1)  # the draw the whole input's dropout takes

    def __call__(self, rows: slice, block: torch.Tensor) -> torch.Tensor:
        view, now = self.view, self.view.draws
        ids = view.rows()[rows]  # a range, or an array of global ids
        view.set_epoch(self.epoch, self.draw)
        try:
            return view.dropout_block(block, self.p, True, tuple(block.shape[1:]), rows=ids)
        finally:
            view.set_epoch(self.epoch, now)


class _ProjectByBlocks(torch.autograd.Function):
    """``drop(x) W^T`` of an input given a block of rows at a time, with W's gradient
    ``sum over blocks of dZ[block]^T drop(x[block])``, the blocks read (and dropped) again."""

    @staticmethod
    def forward(ctx, weight, blocks, rows, drop):
        ctx.blocks, ctx.drop = blocks, drop
        ctx.save_for_backward(weight)
        return _projected(weight, blocks, rows, drop)

    @staticmethod
    def backward(ctx, grad_z):
        weight, = ctx.saved_tensors
        grad = None
        for at, block in ctx.blocks():
            part = grad_z[at].t().mm(block if ctx.drop is None else ctx.drop(at, block))
            grad = part if grad is None else grad.add_(part)
            del part
        return (weight.new_zeros(weight.shape) if grad is None else grad), None, None, None


def _projected(weight, blocks, rows: int, drop) -> torch.Tensor:
    """``drop(x) W^T`` a block of rows at a time (no gradient)."""
    z = None
    for at, block in blocks():
        projected = dense.linear(block if drop is None else drop(at, block), weight)
        if z is None:
            z = projected.new_empty((rows, projected.shape[1]))
        z[at] = projected
        del projected
    return weight.new_empty((0, weight.shape[0])) if z is None else z


def project_by_blocks(weight, blocks: Callable, rows: int, drop=None) -> torch.Tensor:
    """``drop(x) W^T`` of an input ``x`` of ``rows`` rows given a block at a time by
    ``blocks()`` (``drop`` None: x itself), with W's gradient where it needs one."""
    if torch.is_grad_enabled() and weight.requires_grad:
        return _ProjectByBlocks.apply(weight, blocks, rows, drop)
    return _projected(weight, blocks, rows, drop)


@dataclass(frozen=True, eq=False)
class Term:
    """One summand ``c (A_op H) W^T`` of a layer's linear map: ``op`` names a graph operator
    (``SELF``: H itself), ``weight`` is W ``[out, in]``, and ``c`` is 1, or ``1 + eps`` for a
    learned scalar ``eps``."""

    op: str
    weight: torch.Tensor
    eps: Optional[torch.Tensor] = None

    def scaled(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.eps is None else (1 + self.eps) * x


@dataclass(frozen=True, eq=False)
class Maths:
    """A graph layer as ``out(act(sum of terms + bias))``, or ``sum of terms + bias`` when
    ``out`` is None. ``evaluate`` runs it on any GraphView; a strategy that lays the
    matrices out differently (grid3d) composes the same pieces with its block operations."""

    terms: tuple
    bias: Optional[torch.Tensor]
    act: Optional[Callable] = None
    out: Optional[nn.Linear] = None  # a second linear map, after ``act``

    @property
    def in_features(self) -> int:
        return self.terms[0].weight.shape[1]

    @property
    def hidden(self) -> int:
        """The width of the summed linear map."""
        return self.terms[0].weight.shape[0]

    @property
    def out_features(self) -> int:
        return self.out.out_features if self.out is not None else self.hidden

    def by_weight(self) -> list:
        """``[(W, [terms with that W])]`` in order of first use: terms sharing a linear map are
        summed before multiplying by it."""
        groups: dict = {}
        for term in self.terms:
            groups.setdefault(id(term.weight), (term.weight, []))[1].append(term)
        return list(groups.values())

    def aggregates(self, view, h: torch.Tensor) -> list:
        """Every term's ``A_op H`` (the fixed aggregation half of the layer, before any weight)."""
        return [aggregate(view, t.op, h) for t in self.terms]

    def update(self, aggregates: list) -> torch.Tensor:
        """The layer's output from its terms' aggregates (the learned half): ``evaluate``
        with the aggregation done first, whatever the shapes."""
        return self.finish(reduce(operator.add, (reduce(operator.add, (t.scaled(aggregates[self.terms.index(t)])
                                                                       for t in terms)) @ w.t()
                                                 for w, terms in self.by_weight())))

    def evaluate(self, view, h: torch.Tensor) -> torch.Tensor:
        """The layer's output on one process (any GraphView)."""
        return self.finish(self.linear(view, h))

    def linear(self, view, h: torch.Tensor, columns: slice = slice(None)) -> torch.Tensor:
        """The sum of the terms (before the bias), from ``columns`` of the input only: the
        layer's linear map is a sum over input columns, so ranks holding disjoint columns
        add their pieces up to the whole."""
        return reduce(dense.add, (propagate_linear(view, w[:, columns], h, terms) for w, terms in self.by_weight()))

    def projects_first(self) -> bool:
        """Whether ``linear`` multiplies its input by every weight before aggregating
        (``propagate_linear``'s order for these shapes): the input is then used row by row."""
        return all(w.shape[0] <= w.shape[1] for w, _ in self.by_weight())

    def evaluate_by_blocks(self, view, blocks: Callable, rows: int, drop=None) -> torch.Tensor:
        """``evaluate(view, h)`` of a layer that ``projects_first``, its input ``h`` (``rows``
        rows) given a block of rows at a time: ``blocks()`` yields ``(rows slice, h[rows])``
        and is called once per weight (and once more per weight in the backward pass);
        ``drop``: the input's dropout, a block at a time (``BlockDropout``), or None. Each
        product ``h W^T`` is made block by block, then aggregated and summed in ``linear``'s
        order: the whole product's rows, bit for bit, where the BLAS multiplies a row of a
        block as it does a row of the whole (torch's CPU BLAS does for blocks of two rows or
        more; a single row takes another kernel). A weight's gradient is a sum over the
        blocks, the same to rounding as the whole product's."""
        total = None
        for w, terms in self.by_weight():
            z = project_by_blocks(w, blocks, rows, drop)
            summed = reduce(operator.add, (t.scaled(aggregate(view, t.op, z)) for t in terms))
            del z  # before the next weight's product, or the bias
            total = summed if total is None else dense.add(total, summed)
        return self.finish(total, in_place=not torch.is_grad_enabled())  # the sum is this pass's own tensor

    def finish(self, z: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        """The layer's output from its summed terms: bias, then the activation and second map.
        ``in_place``: the bias is added into ``z`` (a pass without gradients that owns ``z``;
        the same kernel, so the same numbers)."""
        if self.bias is not None:
            z = z.add_(self.bias) if in_place else dense.add(z, self.bias)
        return z if self.out is None else self.out(self.act(z))


class GraphLayer(nn.Module):
    """A layer described by ``maths()``; its forward evaluates that description."""

    def maths(self) -> Maths:
        raise NotImplementedError

    @property
    def out_features(self) -> int:
        return self.maths().out_features

    def forward(self, view, h):
        return self.maths().evaluate(view, h)


def aggregate(view, op: str, x: torch.Tensor) -> torch.Tensor:
    return view.destinations(x) if op == SELF else view.spmm(x, op)


def propagate_linear(view, weight: torch.Tensor, h: torch.Tensor, terms) -> torch.Tensor:
    """``sum_k c_k A_k (h W^T)`` computed in the cheaper order: aggregate the narrower of input
    and output (both orders are the same linear map; the choice depends only on the shapes)."""
    if weight.shape[0] <= weight.shape[1]:
        z = dense.linear(h, weight)
        return reduce(operator.add, (t.scaled(aggregate(view, t.op, z)) for t in terms))
    return dense.linear(reduce(operator.add, (t.scaled(aggregate(view, t.op, h)) for t in terms)), weight)
