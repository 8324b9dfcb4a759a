"""A pair's score from its two endpoints' embeddings (``--decoder``).

=============  ===============================================  ==========================
decoder        score of (u, v)                                  parameters
=============  ===============================================  ==========================
``dot``        <z_u, z_v>                                       none
``mlp``        MLP(z_u * z_v): the Hadamard product, one        2 linear layers (the
               hidden layer of the embedding's width, ReLU      second without a bias
                                                                under bpr and margin)
``distmult``   <z_u, diag(r) z_v>, a learned diagonal r per     one vector per relation
               relation (one on an untyped graph; on a typed
               graph, one per ``--link-relation``)
=============  ===============================================  ==========================

Every decoder scores pairs independently of one another, so the ranks' pairs together are
the single process's: their parameters' gradients are sums over pairs, summed over ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import ConfigError
from ..registries import add


class Dot(nn.Module):
    def __init__(self, width: int, shift: bool = True):
        super().__init__()

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return (zu * zv).sum(-1)


class HadamardMLP(nn.Module):
    def __init__(self, width: int, shift: bool = True):
        super().__init__()
        self.hidden, self.out = nn.Linear(width, width), nn.Linear(width, 1, bias=shift)

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(zu * zv))).squeeze(-1)


class DistMult(nn.Module):
    def __init__(self, width: int, shift: bool = True, relations: int = 1):
        super().__init__()
        self.relations = nn.Parameter(torch.ones(relations, width))

    def forward(self, zu: torch.Tensor, zv: torch.Tensor, relation=0) -> torch.Tensor:
        """``relation``: the pairs' relation, one for all or a tensor of one per pair. The ends'
        product is taken first: (u, v) and (v, u) then score the same to the last bit, a tie on
        every strategy, rather than two scores an ulp apart whose order rounding may flip."""
        if isinstance(relation, torch.Tensor):
            relation = relation.to(self.relations.device)
        return (zu * zv * self.relations[relation]).sum(-1)


def score(decoder: nn.Module, zu: torch.Tensor, zv: torch.Tensor, relation=None) -> torch.Tensor:
    """The decoder's scores of the pairs (``zu[i]``, ``zv[i]``) of ``relation`` (None: a graph
    without relations; an index, or a tensor of one per pair): DistMult reads the relation's
    diagonal, the other decoders score any relation's pairs alike."""
    if relation is None or not isinstance(decoder, DistMult):
        return decoder(zu, zv)
    return decoder(zu, zv, relation)


class ForRelation(nn.Module):
    """A decoder's scores of one relation's pairs, as a decoder of pairs alone (``score``)."""

    def __init__(self, decoder: nn.Module, relation: int):
        super().__init__()
        self.decoder, self.relation = decoder, relation

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return score(self.decoder, zu, zv, self.relation)


@dataclass(frozen=True)
class DecoderSpec:
    """One decoder: its name, its class (built with the embedding's width) and a line of help."""

    name: str
    build: Callable[[int], nn.Module]
    summary: str


REGISTRY: dict = {}


def register(spec: DecoderSpec) -> DecoderSpec:
    return add(REGISTRY, spec.name, spec, "decoder")


def names() -> tuple:
    return tuple(REGISTRY)


def build(name: str, width: int, shift: bool = True, relations: int = 1) -> nn.Module:
    """The decoder ``name`` for embeddings of ``width``. ``shift``: whether it may learn a
    constant added to every score. The ranking losses (bpr, margin) compare scores, so such a
    constant's gradient is zero but for rounding, which Adam would amplify into steps that
    differ between runs: they take decoders without one. ``relations``: how many relations
    its pairs belong to (DistMult learns a diagonal for each)."""
    if name not in REGISTRY:
        raise ConfigError(f"config field 'decoder': {name!r} is not one of {', '.join(REGISTRY)}")
    if REGISTRY[name].build is DistMult:
        return DistMult(width, shift, relations)
    return REGISTRY[name].build(width, shift)


for _spec in (DecoderSpec("dot", Dot, "the embeddings' dot product"),
              DecoderSpec("mlp", HadamardMLP, "an MLP on the embeddings' Hadamard product"),
              DecoderSpec("distmult", DistMult, "a learned diagonal per relation between the embeddings")):
    register(_spec)
