"""Sampled mini-batches: an epoch's seed batches (``batches``), neighbour sampling keyed by node
(``sampler``; per relation of a typed graph, ``relations``) and the view a model
runs on a batch's blocks with (``block_view``), and the tier its input features come from
(``features``)."""

from .batches import draw_batches
from .sampler import (DEFAULT_BATCH, RELATIONS, Block, NeighborSampler, Sample, parse_fanouts, row_positions,
                      sampled_operator)
from .relations import RelationSampler, hop_count, sampled_graph, sampler_of
from .features import FeatureTier
from .block_view import BlockView

__all__ = ["DEFAULT_BATCH", "RELATIONS", "Block", "BlockView", "FeatureTier", "NeighborSampler", "RelationSampler",
           "draw_batches", "Sample", "hop_count", "parse_fanouts", "row_positions", "sampled_graph", "sampled_operator",
           "sampler_of"]
