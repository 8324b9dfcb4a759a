"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the raw ``ind.<name>.*`` pickles.

Layout, as in Kipf & Welling's GCN loader: ``allx``/``ally`` hold the first nodes,
``tx``/``ty`` the test nodes, whose ids are listed (unsorted) in ``test.index``: row ``i``
of ``tx`` belongs to node ``test.index[i]``. Ids inside the test range that are missing
from ``test.index`` (15 in CiteSeer) are nodes with no features and no label (they do
have edges); they get a zero feature row, label 0 and no mask, and are listed in
``meta['unlabeled_nodes']``. The public split is train = the first ``len(y)`` nodes,
val = the next 500, test = ``test.index``.

The graph is made undirected, duplicates merged and self-loops dropped, giving the
standard edge counts (Cora 5,278, CiteSeer 4,552, PubMed 44,324 undirected edges).
"""

from __future__ import annotations

import importlib
import io
import pickle

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import GraphError
from ..graph import Graph
from ._build import adjacency_from_edges, index_mask
from ._io import read_raw
from ._text import parse_table

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")

# The only classes the Planetoid pickles need. Anything else is refused, so a tampered
# data file cannot run code through pickle.
_ALLOWED = {
    ("scipy.sparse.csr", "csr_matrix"): ("scipy.sparse", "csr_matrix"),
    ("scipy.sparse._csr", "csr_matrix"): ("scipy.sparse", "csr_matrix"),
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
    ("collections", "defaultdict"): ("collections", "defaultdict"),
    ("__builtin__", "list"): ("builtins", "list"),
    ("builtins", "list"): ("builtins", "list"),
    ("__builtin__", "set"): ("builtins", "set"),
    ("builtins", "set"): ("builtins", "set"),
    ("_codecs", "encode"): ("_codecs", "encode"),  # Python 3 protocol-2 pickles of bytes
}
_NUMPY_CORE = ("numpy.core.multiarray", "numpy._core.multiarray")  # renamed in numpy 2


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module in _NUMPY_CORE and name in ("_reconstruct", "scalar"):
            try:
                core = importlib.import_module("numpy._core.multiarray")
            except ImportError:  # numpy < 2
                core = importlib.import_module("numpy.core.multiarray")
            return getattr(core, name)
        if (module, name) not in _ALLOWED:
            raise GraphError(f"refusing to unpickle {module}.{name}: not a Planetoid data type")
        target_module, target_name = _ALLOWED[(module, name)]
        return getattr(importlib.import_module(target_module), target_name)


def _unpickle(path):
    data = read_raw(path)
    try:
        return _SafeUnpickler(io.BytesIO(data), encoding="latin1").load()
    except GraphError as exc:
        raise GraphError(f"{path}: {exc}") from None
    except EOFError as exc:
        raise GraphError(f"{path}: truncated pickle") from exc
    except (pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise GraphError(f"{path}: not a valid Planetoid pickle ({exc})") from exc


def _labels(onehot, path) -> tuple[np.ndarray, np.ndarray]:
    """Class ids and a 'has a label' flag from one-hot rows."""
    onehot = np.asarray(onehot.todense() if sp.issparse(onehot) else onehot)
    if onehot.ndim != 2:
        raise GraphError(f"{path}: expected a one-hot label matrix, got shape {onehot.shape}")
    return onehot.argmax(1).astype(np.int64), onehot.sum(1) > 0


def load_planetoid(files: dict, name: str, normalize_features: bool = True):
    """``files`` maps each part in PARTS to its path; ``allx`` may be absent (PubMed here):
    then the graph has structure and labels but ``x=None``, because features for only a
    few nodes with zeros elsewhere would silently corrupt any model trained on them."""
    ids = parse_table(read_raw(files["test.index"]), files["test.index"], columns=(1,),
                      int_columns=1, names=("node id",))
    test_ids = ids.ints[:, 0]
    if test_ids.size == 0:
        raise GraphError(f"{files['test.index']}: no test node ids")
    if test_ids.min() < 0:
        raise ids.error(int(np.argmin(test_ids)), f"negative node id {int(test_ids.min())}")
    y_train, ty, ally = (_unpickle(files[k]) for k in ("y", "ty", "ally"))
    graph_dict = _unpickle(files["graph"])
    if not isinstance(graph_dict, dict):
        raise GraphError(f"{files['graph']}: expected an adjacency dict, got {type(graph_dict).__name__}")

    n_all = ally.shape[0]
    n = max(n_all, int(test_ids.max()) + 1, len(graph_dict))
    if ty.shape[0] != test_ids.size:
        raise GraphError(f"{files['ty']}: {ty.shape[0]} rows but test.index lists {test_ids.size} ids")
    if np.unique(test_ids).size != test_ids.size:
        raise GraphError(f"{files['test.index']}: duplicate node ids")
    if int(test_ids.min()) < n_all:
        raise GraphError(f"{files['test.index']}: test id {int(test_ids.min())} overlaps the "
                         f"{n_all} nodes of ally")

    y = np.zeros(n, dtype=np.int64)
    labeled = np.zeros(n, dtype=bool)
    y[:n_all], labeled[:n_all] = _labels(ally, files["ally"])
    y[test_ids], labeled[test_ids] = _labels(ty, files["ty"])
    num_classes = int(np.asarray(ally).shape[1])

    x = None
    if files.get("allx") is not None:
        allx, tx = _unpickle(files["allx"]), _unpickle(files["tx"])
        feats = np.zeros((n, allx.shape[1]), dtype=np.float32)
        feats[:n_all] = np.asarray(allx.todense() if sp.issparse(allx) else allx)
        if tx.shape[0] != test_ids.size:
            raise GraphError(f"{files['tx']}: {tx.shape[0]} rows but test.index lists "
                             f"{test_ids.size} ids")
        feats[test_ids] = np.asarray(tx.todense() if sp.issparse(tx) else tx)
        if normalize_features:  # Kipf & Welling row-normalise; needed to reach their accuracy
            sums = feats.sum(1, keepdims=True)
            np.divide(feats, sums, out=feats, where=sums != 0)
        x = torch.from_numpy(feats)

    src, dst = [], []
    for node, neighbours in graph_dict.items():
        src.append(np.full(len(neighbours), node, dtype=np.int64))
        dst.append(np.asarray(list(neighbours), dtype=np.int64))
    src, dst = np.concatenate(src), np.concatenate(dst)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        bad = int(src.max() if src.max() >= n else dst.max() if dst.max() >= n
                  else min(src.min(), dst.min()))
        raise GraphError(f"{files['graph']}: node id {bad} out of range for {n} nodes")
    raw_entries = int(src.size)
    adj = adjacency_from_edges(src, dst, n, symmetrize=True, drop_self_loops=True)

    n_train = np.asarray(y_train).shape[0]
    if n_train + 500 > n_all:
        raise GraphError(f"{files['y']}: {n_train} training nodes + 500 validation nodes exceed "
                         f"the {n_all} nodes of ally")
    masks = {"train_mask": index_mask(n, np.arange(n_train)),
             "val_mask": index_mask(n, np.arange(n_train, n_train + 500)),
             "test_mask": index_mask(n, test_ids)}
    meta = {"source": "Planetoid (Yang et al. 2016)",
            "split": {"kind": "planetoid-public", "sizes": [int(n_train), 500, int(test_ids.size)]},
            "raw_adjacency_entries": raw_entries,
            "unlabeled_nodes": np.flatnonzero(~labeled).tolist(),
            "normalized_features": bool(normalize_features and x is not None)}
    if x is None:
        meta["missing"] = ("ind.{0}.allx is missing, so x is None: features exist for only "
                           "a few nodes").format(name)
    return Graph.from_adjacency(adj, source=f"{name} ({files['graph']})", directed=False, x=x,
                      y=torch.from_numpy(y), name=name, num_classes=num_classes, meta=meta,
                      **masks)
