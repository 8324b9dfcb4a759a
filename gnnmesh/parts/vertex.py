"""The vertex data every kind of part stores: features as the trainer uses them, labels
and the three split masks, for any set of rows."""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys

import numpy as np
import scipy.sparse as sp
import torch

from ..datasets import structural_features
from ..graph import Graph

SPLITS = ("train_mask", "val_mask", "test_mask")
SLAB = 1 << 16  # source rows read at a time
_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4


def page_out(array: np.ndarray) -> None:
    """Give back to the OS the pages of ``array`` that map a file unmodified (pages of a
    memory-mapped cache file: the next access re-reads them). Anonymous memory and pages
    this process has written are left alone, and so is everything off Linux."""
    if not sys.platform.startswith("linux") or array.nbytes < _PAGE:
        return
    start = array.__array_interface__["data"][0]
    first, last = -(-start // _PAGE) * _PAGE, (start + array.nbytes) // _PAGE * _PAGE
    if last <= first or not _file_backed(first, last) or not _unmodified(first, last):
        return
    _libc().madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED)


def _file_backed(first: int, last: int) -> bool:
    """Whether [first, last) lies in one mapping of a file (from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                fields = line.split()
                lo, hi = (int(v, 16) for v in fields[0].split("-"))
                if lo <= first and last <= hi:
                    return len(fields) >= 6 and fields[5].startswith("/")
    except OSError:
        pass
    return False


def _unmodified(first: int, last: int) -> bool:
    """Whether every resident page of [first, last) is still the file's own page (bit 61 of
    /proc/self/pagemap): a page written through a private mapping has become anonymous,
    and dropping it would lose the write."""
    try:
        with open("/proc/self/pagemap", "rb") as fh:
            fh.seek(first // _PAGE * 8)
            entries = np.frombuffer(fh.read((last - first) // _PAGE * 8), dtype="<u8")
    except OSError:
        return False
    present, file_page = (entries >> 63) & 1, (entries >> 61) & 1
    return len(entries) == (last - first) // _PAGE and bool(np.all(file_page[present == 1] == 1))


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


class VertexData:
    """Rows of a graph's training data. Checks, once, what the trainer would check."""

    def __init__(self, graph: Graph):
        graph.require_node_classification()
        x = graph.x if graph.x is not None else structural_features(graph, "degree")
        if x.layout == torch.sparse_csr:  # kept sparse: only the rows written are densified
            self._x = sp.csr_matrix((x.values().numpy(), x.col_indices().numpy(),
                                     x.crow_indices().numpy()), shape=tuple(x.shape))
        else:
            self._x = x.numpy()
        self.graph = graph
        self.num_features = int(x.shape[1])

    def features(self, ids: np.ndarray) -> np.ndarray:
        """Dense float32 features of rows ``ids`` (original ids, any order).

        Read in slabs of source rows, each given back to the OS once copied: features
        memory-mapped from the dataset cache are never resident all at once, so writing
        parts holds one rank's block, not the whole feature matrix."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.num_features), dtype=np.float32)
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        n = self._x.shape[0]
        cuts = np.searchsorted(sorted_ids, np.arange(0, n + SLAB, SLAB))
        for c in np.flatnonzero(cuts[1:] > cuts[:-1]):
            lo, hi = int(c) * SLAB, min(n, (int(c) + 1) * SLAB)
            slab = self._x[lo:hi]
            rows = slab[sorted_ids[cuts[c]:cuts[c + 1]] - lo]
            out[order[cuts[c]:cuts[c + 1]]] = rows.toarray() if sp.issparse(rows) else rows
            if not sp.issparse(slab):
                page_out(slab)
        return out

    def labels(self, ids: np.ndarray) -> dict:
        """``{"y", "train_mask", "val_mask", "test_mask"}`` of rows ``ids``."""
        out = {"y": self.graph.y.numpy()[ids]}
        for m in SPLITS:
            out[m] = getattr(self.graph, m).numpy()[ids]
        return out
