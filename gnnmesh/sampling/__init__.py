"""Sampled mini-batches: neighbour sampling keyed by node (``sampler``) and the view a model
runs on a batch's blocks with (``view``)."""

from .sampler import Block, NeighborSampler, Sample, parse_fanouts
from .view import BlockView

__all__ = ["Block", "BlockView", "NeighborSampler", "Sample", "parse_fanouts"]
