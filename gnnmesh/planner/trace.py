"""What a model asks of the graph and of dense algebra in one epoch, traced on a tiny graph.

A strategy's traffic and work follow from the graph primitives a model calls (``view.spmm``,
``view.sddmm``, ``view.edge_softmax``) — with the shape of one row of their operands and
whether autograd sends a gradient back through them — and from the dense products on vertex
rows. None of that depends on the graph, so ``trace`` runs the model once forward and backward
(a training step) and once forward without gradients (the trainer's evaluation) on a graph of
a few nodes, and records every call per row. The estimators (``partition.py``, ``tensor.py``)
price the calls on a real graph and layout; ``epoch_compute`` is the compute part they share.
A Trace made for ``inference`` stands for one inference pass instead of an epoch: its passes
are the evaluation alone, and what they price (compute, exchanges, the all-reduces of
``replicated_phases``, ``peak_bytes``) follows.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ..errors import ConfigError
from ..graph import Adjacency
from ..models import build_model, is_built_in
from ..models import spec as model_spec
from ..models.user import is_user_model
from ..validate import format_bytes
from ..relations import parse
from ..view import GraphView
from .machine import GEMM, ComputeRates, Elementwise, SpMM, collective_time

ELEMENT_BYTES = 4   # float32 vertex data, values and gradients


@dataclass(frozen=True)
class Aggregate:
    """``view.spmm(x, op, values)``: ``shape`` is one row of x; ``values`` one edge's values
    (None: the operator's own); ``steps``: aggregations this one stands for (a decoupled
    model's k propagation steps, which tensor parallelism runs between one split and one
    gather)."""
    op: str
    shape: tuple
    input_grad: bool
    values: Optional[tuple] = None
    values_grad: bool = False
    steps: int = 1

    @property
    def row_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def backward(self) -> bool:
        """Whether autograd runs this aggregation's backward."""
        return self.input_grad or self.values_grad


@dataclass(frozen=True)
class EdgeScores:
    """``view.sddmm(dst, src, op)``: ``src`` is one row of the source scores, which every edge
    reads from its source vertex."""
    op: str
    src: tuple
    src_grad: bool

    @property
    def row_elements(self) -> int:
        return math.prod(self.src)


@dataclass(frozen=True)
class EdgeSoftmax:
    op: str
    shape: tuple   # one edge's scores


@dataclass(frozen=True)
class Dropout:
    """``view.dropout`` on vertex rows of ``shape`` (``op`` None) or ``view.edge_dropout`` on
    the entries of operator ``op``, in a training step: a keep-mask drawn and applied
    forward, applied again backward."""
    shape: tuple
    op: Optional[str] = None


@dataclass(frozen=True)
class Dense:
    """A product of vertex rows with a ``k`` x ``n`` weight, ``batch`` times per row."""
    k: int
    n: int
    batch: int
    input_grad: bool


@dataclass(frozen=True)
class Trace:
    """A training step's calls (forward order), an evaluation pass's, and the gradient
    elements the step leaves on parameters (what ranks all-reduce). ``inference``: what is
    priced is one inference pass (the evaluation's forward in eval mode, no gradients), not
    an epoch."""
    train: tuple
    evaluation: tuple
    gradients: int
    inference: bool = False

    def passes(self, evaluate: bool = True) -> tuple:
        """``(calls, training)`` of the training step and, with ``evaluate``, the evaluation;
        for ``inference``, the evaluation alone (``evaluate`` is moot)."""
        if self.inference:
            return ((self.evaluation, False),)
        return ((self.train, True),) + (((self.evaluation, False),) if evaluate else ())

    def ops(self) -> set:
        """The graph operators the model uses."""
        return {c.op for c in self.train + self.evaluation if getattr(c, "op", None) is not None}


TINY_NODES = 5
_DENSE = {F.linear, torch.matmul, torch.mm, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm}


class _Recorder(GraphView):
    """A whole-graph view that records the primitives called on it and, through ``dense``
    (a torch function mode), the dense products on its vertex rows outside the primitives."""

    holds_every_row = True  # its statistics over rows are the whole graph's (``GraphView.row_sum``)

    def __init__(self, adj: Adjacency):
        super().__init__(adj)
        self.calls: list = []
        self.inside = False
        self.dense = _DenseProducts(self)

    def _primitive(self, call, run):
        self.calls.append(call)
        self.inside = True
        try:
            return run()
        finally:
            self.inside = False

    def operator(self, name):
        # the tiny graph has no relations: a relation's operator runs as its normalisation of it
        relation = parse(name)
        return super().operator(name if relation is None else relation[0])

    def spmm(self, x, op="gcn", values=None):
        given = values is not None
        call = Aggregate(op, tuple(x.shape[1:]), x.requires_grad, tuple(values.shape[1:]) if given else None,
                         given and values.requires_grad)
        return self._primitive(call, lambda: super(_Recorder, self).spmm(x, op, values))

    def sddmm(self, dst, src, op="loop", kind="add"):
        return self._primitive(EdgeScores(op, tuple(src.shape[1:]), src.requires_grad),
                               lambda: super(_Recorder, self).sddmm(dst, src, op, kind))

    def edge_softmax(self, scores, op="loop"):
        return self._primitive(EdgeSoftmax(op, tuple(scores.shape[1:])),
                               lambda: super(_Recorder, self).edge_softmax(scores, op))

    def dropout(self, x, p, training):
        if training and p > 0:
            self.calls.append(Dropout(tuple(x.shape[1:])))
        return super().dropout(x, p, training)

    def edge_dropout(self, values, p, training, op="loop"):
        if training and p > 0:
            self.calls.append(Dropout(tuple(values.shape[1:]), op))
        return super().edge_dropout(values, p, training, op)


class _DenseProducts(TorchFunctionMode):
    def __init__(self, view: _Recorder):
        super().__init__()
        self.view = view

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _DENSE and not self.view.inside:
            x, weight = args[0], args[1]
            k, n = (weight.shape[1], weight.shape[0]) if func is F.linear else (weight.shape[0], weight.shape[-1])
            if x.dim() >= 2 and x.shape[0] == TINY_NODES and weight.dim() == 2:
                self.view.calls.append(Dense(int(k), int(n), x.numel() // (TINY_NODES * k), x.requires_grad))
        return func(*args, **(kwargs or {}))


def tiny_graph() -> Adjacency:
    """A directed cycle and its reverse: every primitive has edges to work on."""
    ids = torch.arange(TINY_NODES)
    row = torch.cat([ids, ids])
    col = torch.cat([(ids + 1) % TINY_NODES, (ids - 1) % TINY_NODES])
    return Adjacency.from_coo(row, col, (TINY_NODES, TINY_NODES))


# Options of one model only; another model ignores them, as the trainer passes them.
_MODEL_SPECIFIC = {"heads", "attn_dropout", "k", "alpha", "relations", "bases", "edge_dim"}


# The planner runs the model itself on TINY_NODES nodes (``trace``): its weights and their
# gradients are allocated whatever the graph. Beyond this many parameters (1 GiB of float32,
# twice that with gradients) a plan is refused in one line rather than allocated: sizes up to
# 2^48 are planned from flags and generator specs, which no memory holds as weights.
MAX_TRACED_PARAMETERS = 1 << 28


def within_bounds(construct: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """``construct()`` once its parameters, counted on the meta device (no memory), are at most
    MAX_TRACED_PARAMETERS; a ConfigError saying how many otherwise."""
    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in construct().parameters())
    except Exception:  # noqa: BLE001 - a user's class that cannot be built on the meta device: built as it is
        count = 0
    if count > MAX_TRACED_PARAMETERS:
        raise ConfigError(f"the model would have {count:,} parameters ({format_bytes(ELEMENT_BYTES * count)}); "
                          f"the planner runs the model on a few nodes and plans at most {MAX_TRACED_PARAMETERS:,} "
                          "(give smaller --features, --hidden or --classes)")
    return construct()


def build(widths, model: str = "gcn", decoupled: bool = False, **options) -> torch.nn.Module:
    """The model the trainer would build for ``widths`` (input, the ``hidden`` option of every
    hidden layer — per head for GAT —, classes), without touching the global RNG; a
    ConfigError for one of more than MAX_TRACED_PARAMETERS.
    ``options``: constructor options (``heads`` and ``k`` are ignored by models without them)."""
    return within_bounds(lambda: _build(widths, model, decoupled, **options))


def _build(widths, model: str, decoupled: bool, **options) -> torch.nn.Module:
    widths = tuple(int(w) for w in widths)
    if is_user_model(model):  # a user's class (FILE.py:CLASS): (input, classes) and its --model-args
        from ..models import user
        with torch.random.fork_rng(devices=[]):
            return user.build(model, widths[0], widths[-1], user.parse_args(options.get("args") or ""))
    if len(widths) < 2 or len(set(widths[1:-1])) > 1:
        raise ValueError(f"widths must be (input, hidden, ..., classes) with one hidden width, got {widths}")
    hidden = widths[1] if len(widths) > 2 else options.pop("hidden", 16)
    built = model_spec(model.lower()).form(decoupled) if is_built_in(model.lower()) else None
    if built is not None:
        taken = inspect.signature(built).parameters
        options = {k: v for k, v in options.items() if k in taken or k not in _MODEL_SPECIFIC}
    with torch.random.fork_rng(devices=[]):
        return build_model(model, widths[0], widths[-1], decoupled=decoupled, hidden=hidden,
                           layers=len(widths) - 1, **options)


def trace(net: torch.nn.Module, in_dim: int, forward: Optional[Callable] = None, inference: bool = False) -> Trace:
    """The calls of ``forward(net, view, x)`` (default ``net(view, x)``) in a training step
    and in an evaluation pass; ``inference``: the Trace prices one inference pass."""
    forward = forward or (lambda m, view, x: m(view, x))
    view = _Recorder(tiny_graph())
    x = torch.randn(TINY_NODES, in_dim, generator=torch.Generator().manual_seed(0))  # not the global RNG
    was_training = net.training
    try:
        net.train()
        with torch.enable_grad(), view.dense:
            out = forward(net, view, x)
        train = tuple(view.calls)
        net.zero_grad(set_to_none=True)
        out.sum().backward()
        gradients = sum(p.numel() for p in net.parameters() if p.grad is not None)
        net.zero_grad(set_to_none=True)
        view.calls = []
        net.eval()
        with torch.no_grad(), view.dense:
            forward(net, view, x)
        return Trace(train, tuple(view.calls), gradients, inference)
    finally:
        net.train(was_training)


def epoch_compute(traced: Trace, rates: ComputeRates, rows: int, aggregation: Callable, edges: Callable,
                  evaluate: bool = True) -> dict:
    """Seconds of one rank's compute in an epoch, ``{"aggregate": ..., "dense": ...}``: the
    training step and, with ``evaluate``, the evaluation pass (``traced.passes``).

    ``rows``: the rank's vertex rows for dense work; ``aggregation(call)``: the SpMM an
    ``Aggregate`` runs there; ``edges(op)``: the edges whose scores it computes. Backward
    adds an aggregation's transpose (when its input wants a gradient) and its per-edge value
    gradients (priced as one more SpMM); the products dW and, when the input wants one, dX;
    the edge work once more. Elementwise work is two passes over every product's output
    forward and one backward (bias, activation), one over the edges for scores and three
    for a softmax; a dropout draws its mask (``rates.dropout``) and applies it once more
    backward, on the rank's rows (dense) or an operator's edges (aggregate). The loop's own
    work (``rates.overhead``) counts as dense."""
    out = {"aggregate": 0.0, "dense": rates.overhead(traced.inference)}
    for calls, backward in traced.passes(evaluate):
        for call in calls:
            if isinstance(call, Aggregate):
                op = aggregation(call)
                seconds = rates.spmm(op)
                if backward:
                    seconds += call.input_grad * rates.spmm(transposed(op)) + call.values_grad * rates.spmm(op)
                out["aggregate"] += call.steps * seconds
            elif isinstance(call, Dense):
                m = rows * call.batch
                seconds = rates.gemm(GEMM(m, call.k, call.n)) + rates.elementwise(Elementwise(2 * m * call.n))
                if backward:
                    seconds += rates.gemm(GEMM(call.k, m, call.n)) + rates.elementwise(Elementwise(m * call.n))
                    seconds += call.input_grad * rates.gemm(GEMM(m, call.n, call.k))
                out["dense"] += seconds
            elif isinstance(call, Dropout):
                vertex = call.op is None
                elements = (rows if vertex else edges(call.op)) * math.prod(call.shape)
                seconds = rates.dropout(elements) + rates.elementwise(Elementwise(elements))
                out["dense" if vertex else "aggregate"] += seconds
            else:
                scores = isinstance(call, EdgeScores)
                width = call.row_elements if scores else math.prod(call.shape)
                seconds = rates.elementwise(Elementwise((1 if scores else 3) * edges(call.op) * width))
                out["aggregate"] += seconds * (1 + backward)
    return out


def slowest(computes: list, rates: ComputeRates) -> dict:
    """The epoch's compute, from each rank's (``epoch_compute``): the slowest rank's, which
    every exchange waits for. Where ranks share cores (``rates.crowding`` > 1, already in
    each rank's costs), a rank that finishes early hands its cores to the others, so the
    epoch is no shorter than the slowest rank alone on its cores, nor than all ranks'
    work spread evenly over the shared cores."""
    totals = [sum(c.values()) for c in computes]
    worst = max(range(len(computes)), key=totals.__getitem__)
    if rates.crowding <= 1 or totals[worst] == 0:
        return computes[worst]
    spread = max(totals[worst] / rates.crowding, sum(totals) / len(totals)) / totals[worst]
    return {term: seconds * spread for term, seconds in computes[worst].items()}


def transposed(op: SpMM) -> SpMM:
    return SpMM(op.common, op.rows, op.nnz, op.width)


# What the trainer all-reduces besides gradients: the summed loss of the step (one float) and,
# in an evaluation, the hits on the train, validation and test rows (three).
LOSS_ELEMENTS, EVALUATION_ELEMENTS = 1, 3


def replicated_phases(world: int, traced: Trace, evaluate: bool, link: tuple) -> tuple:
    """The ``grad`` and ``metrics`` phases every strategy with replicated weights runs in the
    passes of ``traced`` (a training step: one all-reduce of the gradients and one of the
    loss; an evaluation: one of its hits; nothing on one rank): ``(bytes per phase and rank,
    seconds per phase)``; ``link``: (bandwidth, latency) of a collective over all ranks."""
    buffers = {"grad": [], "metrics": []}
    for _, training in traced.passes(evaluate):
        if training:
            buffers["grad"] += [traced.gradients * ELEMENT_BYTES] if traced.gradients else []
        buffers["metrics"].append((LOSS_ELEMENTS if training else EVALUATION_ELEMENTS) * ELEMENT_BYTES)
    counted = {phase: [sum(sizes) if world > 1 else 0] * world for phase, sizes in buffers.items()}
    seconds = {phase: sum(collective_time("all_reduce", n, world, *link) for n in sizes)
               for phase, sizes in buffers.items()}
    return counted, seconds


def peak_bytes(net: torch.nn.Module, traced: Trace, in_dim: int, rows: int, structure: int, aggregated: Callable,
               gathered: Callable, edges: Callable) -> int:
    """One rank's ``Estimate.peak_bytes``: ``structure`` (its graph operators), its ``rows``
    of vertex data (features, labels, masks), the parameters with their gradients and Adam's
    two moments, and twice what a training step saves for backward: every product's output,
    ``aggregated(call)`` elements per aggregation, ``gathered(call)`` per score gather, two
    values per edge (``edges(op)``) per softmax.

    For one inference pass (``traced.inference``, no autograd): the parameters alone and the
    same products of the evaluation pass, once. A no-grad pass frees each product after its
    last use, so holding all of them at once is an upper bound of its peak."""
    inference = traced.inference
    saved = 0
    for call in (traced.evaluation if inference else traced.train):
        if isinstance(call, Dense):
            saved += rows * call.batch * call.n
        elif isinstance(call, Aggregate):
            saved += aggregated(call)
        elif isinstance(call, EdgeScores):
            saved += gathered(call)
        elif isinstance(call, EdgeSoftmax):
            saved += 2 * edges(call.op) * math.prod(call.shape)
    vertex = rows * (in_dim * ELEMENT_BYTES + 8 + 3)
    parameters = (1 if inference else 4) * ELEMENT_BYTES * sum(p.numel() for p in net.parameters())
    return structure + vertex + parameters + (1 if inference else 2) * ELEMENT_BYTES * saved
