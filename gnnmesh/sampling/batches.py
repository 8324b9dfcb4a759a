"""The seed batches of an epoch, drawn the one way mini-batch training, its dry run and the
``shp`` partitioner all share, so that they see the same batches."""

from __future__ import annotations

import numpy as np


def draw_batches(pool: np.ndarray, batch_size: int, seed: int, epoch: int) -> list:
    """The seed batches of one epoch as mini-batch training draws them: a permutation of
    ``pool`` keyed by (seed, epoch) cut into ``batch_size`` pieces (the last may be shorter)."""
    order = np.random.default_rng([seed, epoch]).permutation(pool)
    return [order[i:i + batch_size] for i in range(0, order.shape[0], batch_size)]
