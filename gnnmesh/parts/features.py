"""A rank's features mapped from its part file rather than read into memory.

Features are most of a graph's data (128 floats a node are 512 bytes, against tens of bytes
of its edges), so a rank that predicts from parts need not hold its table whole: mapped,
a block of rows is paged in when a pass reads it and given back (``MADV_DONTNEED``) once
the pass is done with it. The mapping is private (copy on write): the features a run sees
are the file's, whatever else writes to the file; pages are given back only where nothing
has written to them (``give_back``'s callers), since a given-back page is read again from
the file.
"""

from __future__ import annotations

import mmap
from typing import Iterator, Optional

import numpy as np
import torch

from ..graph import check_finite_rows

BLOCK_ROWS = 16_384  # rows paged in at a time: 8 MiB of 128 float32 features


def row_ranges(total: int, rows: Optional[int] = None) -> Iterator[slice]:
    """The slices of ``0..total-1`` in order, ``rows`` at a time (default ``BLOCK_ROWS``, at
    least 2), with no last block of one row: a BLAS multiplies a single row with another
    kernel, whose sums may differ from the same row's within a larger block."""
    rows, lo = max(2, rows or BLOCK_ROWS), 0
    while lo < total:
        hi = min(lo + rows, total)
        if hi == total - 1:
            hi = total
        yield slice(lo, hi)
        lo = hi


class MappedFeatures:
    """Float32 features ``[rows, width]`` mapped from a ``.npy`` file: ``tensor`` is the whole
    table (its pages come in as they are read); ``blocks`` hands it out a block of rows at a
    time, each block's pages given back once the next is asked for."""

    def __init__(self, array: np.ndarray, where: str = ""):
        self.array, self.where = array, where  # a numpy.memmap (another array: nothing to give back)
        self.tensor = torch.from_numpy(self.array)

    def __len__(self) -> int:
        return self.array.shape[0]

    def blocks(self, rows: Optional[int] = None) -> Iterator[tuple]:
        """``(rows slice, features of those rows)`` in order, ``rows`` at a time (default
        ``BLOCK_ROWS``); a block's pages are given back when the caller asks for the next one
        (or stops asking)."""
        for at in row_ranges(len(self), rows):
            try:
                yield at, self.tensor[at]
            finally:
                self.give_back(at.start, at.stop)

    def check_finite(self) -> None:
        """A GraphError naming the node and feature of the first value that is not finite,
        read a block at a time (the check leaves no page of the table resident)."""
        for rows, block in self.blocks():
            check_finite_rows(self.where, block, rows.start)

    def give_back(self, lo: int = 0, hi=None) -> None:
        """Drop the pages wholly inside rows ``lo..hi-1`` from this process's memory (they are
        read again from the file if used again). Nothing where the mapping cannot say so."""
        hi = len(self) if hi is None else hi
        view = getattr(self.array, "_mmap", None)
        advise = getattr(view, "madvise", None)
        if advise is None or hi <= lo or not hasattr(mmap, "MADV_DONTNEED"):
            return
        # the mapping starts at the file offset rounded down to the allocation granularity
        start_in_map = self.array.offset % mmap.ALLOCATIONGRANULARITY
        row_bytes = self.array.strides[0]
        first = start_in_map + lo * row_bytes
        last = start_in_map + hi * row_bytes
        first = -(-first // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: a neighbour's rows stay
        last = last // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:
            advise(mmap.MADV_DONTNEED, first, last - first)
