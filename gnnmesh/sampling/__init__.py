"""Sampled mini-batches: an epoch's seed batches (``batches``), neighbour sampling keyed by node (``sampler``) and the view a model
runs on a batch's blocks with (``block_view``), and the tier its input features come from
(``features``)."""

from .batches import draw_batches
from .sampler import DEFAULT_BATCH, Block, NeighborSampler, Sample, parse_fanouts, row_positions, sampled_operator
from .features import FeatureTier
from .block_view import BlockView

__all__ = ["DEFAULT_BATCH", "Block", "BlockView", "FeatureTier", "NeighborSampler", "draw_batches", "Sample", "parse_fanouts",
           "row_positions", "sampled_operator"]
