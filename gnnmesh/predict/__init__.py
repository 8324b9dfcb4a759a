"""Using a trained model: its outputs for every node (or a chosen set) under every full-graph
strategy, written as one part per rank with a manifest (``gnnmesh predict``), and read back
in global id order (``read``). The library's entry is ``Trainer.predict``."""

from .nodes import read_node_file, selected
from .outputs import OUTPUTS, Output, layer_count, rank_output, through_layer
from .store import FORMATS, Prediction, read, write

__all__ = ["OUTPUTS", "FORMATS", "Output", "Prediction", "layer_count", "rank_output", "read",
           "read_node_file", "selected", "through_layer", "write"]
