"""A pair's score from its two endpoints' embeddings (``--decoder``).

=============  ===============================================  ==========================
decoder        score of (u, v)                                  parameters
=============  ===============================================  ==========================
``dot``        <z_u, z_v>                                       none
``mlp``        MLP(z_u * z_v): the Hadamard product, one        2 linear layers (the
               hidden layer of the embedding's width, ReLU      second without a bias
                                                                under bpr and margin)
``distmult``   <z_u, diag(r) z_v>, a learned diagonal r per     one vector per relation
               relation (one relation until graphs are typed)
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

    def forward(self, zu: torch.Tensor, zv: torch.Tensor, relation: int = 0) -> torch.Tensor:
        return (zu * self.relations[relation] * zv).sum(-1)


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


def build(name: str, width: int, shift: bool = True) -> nn.Module:
    """The decoder ``name`` for embeddings of ``width``. ``shift``: whether it may learn a
    constant added to every score. The ranking losses (bpr, margin) compare scores, so such a
    constant's gradient is zero but for rounding, which Adam would amplify into steps that
    differ between runs: they take decoders without one."""
    if name not in REGISTRY:
        raise ConfigError(f"config field 'decoder': {name!r} is not one of {', '.join(REGISTRY)}")
    return REGISTRY[name].build(width, shift)


for _spec in (DecoderSpec("dot", Dot, "the embeddings' dot product"),
              DecoderSpec("mlp", HadamardMLP, "an MLP on the embeddings' Hadamard product"),
              DecoderSpec("distmult", DistMult, "a learned diagonal per relation between the embeddings")):
    register(_spec)
