"""Near-equal contiguous ranges: the one rule by which every strategy cuts vertex rows, feature
columns or grid blocks among ranks (tensor's row and column layouts, grid3d's blocks and block
files, the parts writers), so that two strategies' cuts of the same size agree."""

from __future__ import annotations

import numpy as np


def block_bounds(size: int, parts: int) -> np.ndarray:
    """``parts + 1`` cut points splitting ``range(size)`` into contiguous ranges whose
    sizes differ by at most one, the larger ones first (``numpy.array_split``'s rule)."""
    base, extra = divmod(int(size), int(parts))
    sizes = np.full(int(parts), base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def even_bounds(total: int, parts: int) -> list:
    """``block_bounds`` as Python ints."""
    return block_bounds(total, parts).tolist()


def sizes(size: int, parts: int) -> list:
    """The lengths of ``range(size)`` cut into ``parts`` near-equal blocks."""
    return np.diff(block_bounds(size, parts)).tolist()


def cut(size: int, parts: int, index: int) -> slice:
    """Block ``index`` of ``range(size)`` cut into ``parts`` near-equal blocks."""
    b = block_bounds(size, parts)
    return slice(int(b[index]), int(b[index + 1]))
