"""The vertex data every kind of part stores: features as the trainer uses them, labels
and the three split masks, for any set of rows."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..datasets import structural_features
from ..errors import ConfigError
from ..graph import Graph

SPLITS = ("train_mask", "val_mask", "test_mask")


class VertexData:
    """Rows of a graph's training data. Checks, once, what the trainer would check."""

    def __init__(self, graph: Graph):
        if graph.y is None:
            raise ConfigError(f"dataset '{graph.name}' has no labels; node classification needs them")
        if any(getattr(graph, m) is None for m in SPLITS):
            raise ConfigError(f"dataset '{graph.name}' has no train/val/test split")
        x = graph.x if graph.x is not None else structural_features(graph, "degree")
        if x.layout == torch.sparse_csr:  # kept sparse: only the rows written are densified
            self._x = sp.csr_matrix((x.values().numpy(), x.col_indices().numpy(),
                                     x.crow_indices().numpy()), shape=tuple(x.shape))
        else:
            self._x = x.numpy()
        self.graph = graph
        self.num_features = int(x.shape[1])

    def features(self, ids: np.ndarray) -> np.ndarray:
        """Dense float32 features of rows ``ids`` (original ids)."""
        x = self._x[ids]
        return np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float32)

    def labels(self, ids: np.ndarray) -> dict:
        """``{"y", "train_mask", "val_mask", "test_mask"}`` of rows ``ids``."""
        out = {"y": self.graph.y.numpy()[ids]}
        for m in SPLITS:
            out[m] = getattr(self.graph, m).numpy()[ids]
        return out
