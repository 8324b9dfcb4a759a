"""A homogeneous model on a typed graph, one copy of each layer per relation (what PyG's
``to_hetero`` and DGL's ``HeteroGraphConv`` do): ``per_relation(model, relations)``.

Each layer of the model becomes one copy per relation, with its own weights, that sees only
that relation's edges; their outputs are summed (or averaged) per node. A copy runs on a
``RelationView`` of the view it is given, which turns the layer's operators into that
relation's (``mean`` into ``mean@r``, ``sum`` into ``sum@r``, ``loop`` into ``loop@r``, its
pattern with a self-loop per node: a GAT's), so every strategy runs the copies as it runs any
per-relation operator (``gnnmesh.relations``). A layer whose maths are terms (``GraphLayer``:
GraphSAGE's) stays terms — the copies' terms side by side — so the strategies that take a
layer's maths apart (grid3d, the mini-batch routes that split a first layer) keep doing so.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from ..relations import SEPARATOR
from .base import SELF, GraphLayer, LayerStack, Maths, Term

AGGREGATIONS = ("sum", "mean")
# The operators a relation has (``gnnmesh.relations``); a layer on another (GCN's symmetric
# normalisation, ``gcn``) has no per-relation form.
RELATION_NORMS = ("mean", "sum", "loop")


def relation_operator(op: str, relation: str) -> str:
    """The name of operator ``op`` restricted to ``relation``."""
    if op == SELF:
        return SELF
    if op not in RELATION_NORMS:
        raise ConfigError(f"a layer on operator {op!r} has no per-relation form; per-relation layers aggregate "
                          f"with {', '.join(RELATION_NORMS)} (sage, gin, gat)")
    return f"{op}{SEPARATOR}{relation}"


class RelationView:
    """``view`` as a layer of one relation sees it: every operator named by a method is that
    relation's; everything else is the view's own."""

    def __init__(self, view, relation: str):
        self._view, self.relation = view, relation

    def __getattr__(self, name):
        return getattr(self._view, name)

    def spmm(self, x, op="gcn", values=None):
        return self._view.spmm(x, relation_operator(op, self.relation), values)

    def sddmm(self, dst, src, op="loop", kind="add"):
        return self._view.sddmm(dst, src, relation_operator(op, self.relation), kind)

    def edge_softmax(self, scores, op="loop"):
        return self._view.edge_softmax(scores, relation_operator(op, self.relation))

    def edge_dropout(self, values, p, training, op="loop"):
        return self._view.edge_dropout(values, p, training, relation_operator(op, self.relation))

    def attention(self, z, s_dst, s_src, op="loop", negative_slope=0.2, dropout=0.0, training=False):
        return self._view.attention(z, s_dst, s_src, relation_operator(op, self.relation), negative_slope, dropout,
                                    training)

    def operator(self, name):
        return self._view.operator(relation_operator(name, self.relation))

    def entries(self, op):
        return self._view.entries(relation_operator(op, self.relation))

    def edge_sum(self, messages, op="sum"):
        return self._view.edge_sum(messages, relation_operator(op, self.relation))

    def edge_features(self, op="loop"):
        return self._view.edge_features(relation_operator(op, self.relation))


class PerRelation(nn.Module):
    """One copy of ``layer`` per relation (``copies``: the layers themselves), summed or
    averaged (``aggr``) per node."""

    def __init__(self, copies, relations: tuple, aggr: str = "sum"):
        super().__init__()
        if aggr not in AGGREGATIONS:
            raise ConfigError(f"per-relation aggregation {aggr!r}: choose from {', '.join(AGGREGATIONS)}")
        self.copies, self.relations, self.aggr = nn.ModuleList(copies), tuple(relations), aggr
        self.operators = tuple(dict.fromkeys(relation_operator(op, r) for layer, r in zip(self.copies, self.relations)
                                             for op in _operators(layer) if op != SELF))

    @property
    def out_features(self) -> int:
        return self.copies[0].out_features

    def forward(self, view, h):
        outs = [layer(RelationView(view, r), h) for layer, r in zip(self.copies, self.relations)]
        total = torch.stack(outs).sum(0)
        return total / len(outs) if self.aggr == "mean" else total


class PerRelationTerms(PerRelation, GraphLayer):
    """``PerRelation`` of a layer whose maths are terms and a bias (no second map): the copies'
    terms side by side, each on its relation's operator, the biases summed (a mean scales
    every weight and bias by 1 / relations)."""

    def maths(self) -> Maths:
        scale = 1.0 / len(self.copies) if self.aggr == "mean" else 1.0
        terms, bias = [], None
        for layer, r in zip(self.copies, self.relations):
            m = layer.maths()
            terms += [Term(relation_operator(t.op, r), t.weight * scale if scale != 1.0 else t.weight, t.eps)
                      for t in m.terms]
            if m.bias is not None:
                b = m.bias * scale if scale != 1.0 else m.bias
                bias = b if bias is None else bias + b
        return Maths(tuple(terms), bias)

    def forward(self, view, h):
        return self.maths().evaluate(view, h)


def per_relation(build, relations, aggr: str = "sum") -> LayerStack:
    """The layer stack that ``build()`` returns (a function making a ``LayerStack``, called once
    per relation so that each copy draws its own initial weights), with its layer ``i`` replaced
    by the relations' copies of layer ``i``: each sees only its relation's edges, and their
    outputs are summed or averaged (``aggr``) per node. ``relations``: a typed graph's relation
    names (``graph.adj.relations.names``)."""
    relations = tuple(relations)
    if not relations:
        raise ConfigError("per-relation layers need a typed graph's relations")
    built = [build() for _ in relations]
    model = built[0]
    if not all(isinstance(m, LayerStack) for m in built):
        raise ConfigError(f"per-relation layers wrap a LayerStack; {type(model).__name__} is not one")
    for i, layer in enumerate(model.layers):
        copies = [m.layers[i] for m in built]
        terms = isinstance(layer, GraphLayer) and layer.maths().out is None
        model.layers[i] = (PerRelationTerms if terms else PerRelation)(copies, relations, aggr)
    return model


def _operators(layer) -> tuple:
    if isinstance(layer, GraphLayer):
        return tuple(t.op for t in layer.maths().terms)
    return tuple(getattr(layer, "operators", ("loop",)))
