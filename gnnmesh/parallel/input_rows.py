"""The rows of model input a rank holds, as learned input embeddings (``--embed-dim``,
``gnnmesh.train.embeddings``) read and change them: where they live, their gradient after a
backward pass, and how new values are written back.

Every strategy that learns inputs holds each input row where it already holds its features,
so the strategies' forward and backward passes carry the embeddings with no code of their own:
the input simply needs a gradient. ``LeafRows`` is the features as a tensor on the rank (one
process, partition, tensor, mini-batch); the out-of-core strategy keeps them in its host tier
(``gnnmesh.parallel.offload.host_tier.HostRows``).
"""

from __future__ import annotations

import numpy as np
import torch


class InputRows:
    """The input rows of one rank. ``ids``: the global id of each (row ``i`` is node
    ``ids[i]``); ``replicated``: every rank holds every row, and each rank's gradient is its own
    part of the whole (summed over ranks), rather than each row's gradient being whole on the
    one rank that holds it."""

    ids: np.ndarray
    replicated: bool = False

    def read(self, positions: torch.Tensor, columns: slice) -> torch.Tensor:
        raise NotImplementedError

    def write(self, positions: torch.Tensor, columns: slice, values: torch.Tensor) -> None:
        raise NotImplementedError

    def gradient(self, positions: torch.Tensor, columns: slice) -> torch.Tensor:
        """The gradient of the last backward pass at ``positions``, ``columns`` (zeros where
        none reached them)."""
        raise NotImplementedError

    def clear_gradient(self) -> None:
        """Forget the gradient, before the next backward pass adds its own."""


class LeafRows(InputRows):
    """The rank's input ``x`` as a tensor, made a leaf that autograd gives a gradient."""

    def __init__(self, data, ids: np.ndarray, replicated: bool = False):
        data.x = data.x.detach().clone().requires_grad_(True)  # its own storage: written in place
        self.x, self.ids, self.replicated = data.x, np.asarray(ids, dtype=np.int64), replicated

    def read(self, positions, columns):
        return self.x.detach()[positions.to(self.x.device), columns].cpu()

    @torch.no_grad()
    def write(self, positions, columns, values):
        rows = positions.to(self.x.device)
        self.x[rows, columns] = values.to(self.x.device, self.x.dtype)

    def gradient(self, positions, columns):
        grad = self.x.grad
        if grad is None:
            return torch.zeros(len(positions), columns.stop - columns.start)
        return grad[positions.to(grad.device), columns].cpu()

    def clear_gradient(self):
        self.x.grad = None
