"""Modules that normalise or drop out vertex rows exactly under every strategy, and the torch
modules they replace.

A rank holds some rows of the graph. ``nn.BatchNorm1d`` normalises by the statistics of the
rows it is given, one rank's, and ``nn.Dropout`` draws its mask from the rank's own random
stream: both give results that change with the number of ranks and the split, without a
word. ``BatchNorm`` (``view.batch_norm``) sums its statistics over every rank's rows, and
``Dropout`` (``view.dropout``) draws each row's mask from its global id, so both equal the
single process. A model that holds one of the torch modules is refused when it is built
(``row_mixing_problem``); functional calls (``F.dropout``, ``torch.rand``) are found by
running the model (``gnnmesh check-model``).
"""

from __future__ import annotations

import torch
from torch import nn

BATCH_NORM = "gnnmesh.models.BatchNorm (view.batch_norm: statistics over every rank's rows)"
DROPOUT = "gnnmesh.models.Dropout (view.dropout(x, p, self.training): the same mask however the rows are split)"
PER_ROW = "a per-row normalisation (nn.LayerNorm) or gnnmesh.models.BatchNorm"

# Torch modules whose output for a row depends on the other rows a rank holds, or on the
# rank's own random numbers; with each, what to write instead.
REPLACEMENTS = {
    nn.modules.batchnorm._BatchNorm: BATCH_NORM,  # BatchNorm1d/2d/3d, SyncBatchNorm, the lazy ones
    nn.modules.instancenorm._InstanceNorm: PER_ROW,  # on [rows, channels] input: statistics over the rows
    nn.modules.dropout._DropoutNd: DROPOUT,  # Dropout, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout
}


def row_mixing_problem(model: nn.Module) -> str:
    """Why ``model`` cannot be exact across ranks ('' if no module of it says so): each
    submodule that mixes rows or draws its own random numbers, by name, with its replacement."""
    found = []
    for name, module in model.named_modules():
        for kind, replacement in REPLACEMENTS.items():
            if isinstance(module, kind) and not _inert(module):
                found.append(f"'{name or 'the model'}' is a torch.nn.{type(module).__name__}: use {replacement}")
                break
    if not found:
        return ""
    return ("it depends on how its rows are split among ranks: " + "; ".join(found))


def _inert(module: nn.Module) -> bool:
    """A dropout that drops nothing changes no row."""
    return isinstance(module, nn.modules.dropout._DropoutNd) and module.p == 0


class BatchNorm(nn.Module):
    """``nn.BatchNorm1d`` for vertex rows, called as ``norm(view, x)``: its statistics are
    every rank's rows' (``view.batch_norm``), so it equals the single process under every
    strategy that can sum over rows (single, partition, tensor)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
        else:
            self.running_mean = self.running_var = None

    def forward(self, view, x: torch.Tensor) -> torch.Tensor:
        return view.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                               self.momentum, self.eps)


class Dropout(nn.Module):
    """``nn.Dropout`` for vertex rows, called as ``drop(view, x)``: each row's mask follows
    from its global id (``view.dropout``), the same however the rows are split."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, view, x: torch.Tensor) -> torch.Tensor:
        return view.dropout(x, self.p, self.training)
