"""METIS k-way with several balance constraints at once.

pymetis passes one weight per vertex (one constraint), but a rank's memory is its vertex
count times the feature and hidden widths, while its aggregation time is its nonzeros: a
partition balanced only by nonzeros gave one of four R-MAT parts 465k vertices and another
167k. METIS itself balances any number of constraints (``ncon``), so this calls
``METIS_PartGraphKway`` in the METIS library pymetis ships, with pymetis's own option
layout, through ctypes.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

METIS_OK = 1
STATUS = {-2: "input error", -3: "out of memory", -4: "error"}


@lru_cache(maxsize=1)
def _library() -> Optional[tuple]:
    """``(function, idx dtype)`` of the METIS bundled in pymetis, or None where that build
    does not export it."""
    try:
        import pymetis._internal as internal
        function = ctypes.CDLL(internal.__file__).METIS_PartGraphKway
    except (ImportError, OSError, AttributeError):
        return None
    dtype = np.int64 if internal._idx_type_width() == 64 else np.int32
    function.restype = ctypes.c_int
    return function, dtype


def available() -> bool:
    return _library() is not None


def part_graph_kway(xadj: np.ndarray, adjncy: np.ndarray, weights: Sequence[np.ndarray],
                    parts: int, epsilon: float, seed: int) -> np.ndarray:
    """Parts of a symmetric graph (CSR without self-loops) balancing every array of
    ``weights`` (one per constraint, positive integers) within 1 + ``epsilon``, minimizing
    the edge cut. Raises RuntimeError when METIS fails or is not reachable."""
    import pymetis
    import pymetis._internal as internal

    found = _library()
    if found is None:
        raise RuntimeError("this pymetis build does not export METIS_PartGraphKway")
    function, idx = found
    n = int(xadj.shape[0] - 1)
    options = pymetis.Options(ufactor=max(1, int(round(1000 * epsilon))), seed=int(seed))
    arrays = {
        "nvtxs": np.array([n], idx), "ncon": np.array([len(weights)], idx),
        "xadj": np.ascontiguousarray(xadj, dtype=idx),
        "adjncy": np.ascontiguousarray(adjncy, dtype=idx),
        # METIS reads vertex weights interleaved: vwgt[v * ncon + c]
        "vwgt": np.ascontiguousarray(np.stack([np.asarray(w) for w in weights], axis=1), dtype=idx),
        "nparts": np.array([parts], idx),
        "options": np.array([options._get(i) for i in range(internal.Options._len())], dtype=idx),
        "objval": np.zeros(1, idx), "part": np.zeros(n, idx),
    }
    pointer = {name: a.ctypes.data_as(ctypes.c_void_p) for name, a in arrays.items()}
    status = function(pointer["nvtxs"], pointer["ncon"], pointer["xadj"], pointer["adjncy"],
                      pointer["vwgt"], None, None, pointer["nparts"], None, None,
                      pointer["options"], pointer["objval"], pointer["part"])
    if status != METIS_OK:
        raise RuntimeError(f"METIS_PartGraphKway failed: {STATUS.get(status, status)}")
    return arrays["part"].astype(np.int64)
