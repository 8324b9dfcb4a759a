"""Edge features: a float matrix on the graph's entries, and every operator's rows of it.

A graph's edge features are one ``[nnz, F]`` table keyed by its adjacency's entries
(``Adjacency.edge_features``): row ``e`` belongs to entry ``e``, in CSR order. Several edges
that make one entry (an edge listed twice, or a pair joined by two relations of a typed
graph) make one entry whose features are their sum, as their weights are summed.

An operator carries the features of the entries it shares with the graph: ``"sum"``,
``"mean"`` and a relation's ``"sum@r"`` / ``"mean@r"`` are the graph's (or the relation's)
entries. A self-loop an operator adds (``"loop"``, ``"gcn"``, ``"loop@r"``) carries the mean
of the features of its row's other entries in that operator (zeros in a row without any): the
``fill_value="mean"`` PyG's ``GATConv(edge_dim=...)`` gives the loops it adds. A loop that is
an edge of the graph keeps its own features (PyG would replace them by that mean).

Every strategy's view gives a layer the rows of its own entries (``GraphView.edge_features``),
cut from these tables by the global entry ids the view keeps anyway (``GraphView.entries``).
"""

from __future__ import annotations

import numpy as np
import torch

from .errors import ConfigError, GraphError
from .graph import Adjacency, entry_of_edges
from .relations import SEPARATOR, parse


def operator_features(name: str, adj: Adjacency, build) -> torch.Tensor:
    """The ``[nnz, F]`` features of operator ``name``'s entries (CSR order of ``build(name,
    adj)``, ``gnnmesh.view.operator_of``, which sits above this module), from the graph
    adjacency ``adj``'s; built once per structure. A graph without edge features is a
    ConfigError."""
    features = adj.edge_features
    if features is None:
        raise ConfigError(f"operator {name!r}: the graph has no edge features (load them with the graph, e.g. "
                          "a 2-D edge_attr of a PyG Data, or build the model without edge_dim)")
    cache = adj._structure_cache()
    key = ("edge_features", name)
    if key not in cache:
        relation = parse(name)
        base_name = f"sum{SEPARATOR}{relation[1]}" if relation is not None and relation[0] != "sum" else None
        base, base_features = (adj, features) if base_name is None else \
            (build(base_name, adj), operator_features(base_name, adj, build))
        cache[key] = carried(base, base_features, build(name, adj), name)
    return cache[key]


def carried(base: Adjacency, features: torch.Tensor, op: Adjacency, name: str) -> torch.Tensor:
    """The features of ``op``'s entries: those of ``base``'s at the same place, the row mean of
    the others for a loop ``op`` adds; GraphError for any other entry ``base`` lacks."""
    if op.nnz == base.nnz and torch.equal(op.indptr, base.indptr) and torch.equal(op.indices, base.indices):
        return features
    rows, cols = op.row().numpy(), op.indices.numpy()
    at = entry_of_edges(base, rows, cols)
    found = at >= 0
    strangers = ~found & (rows != cols)
    if np.any(strangers):
        e = int(np.flatnonzero(strangers)[0])
        raise GraphError(f"operator {name!r}: its entry {int(cols[e])} -> {int(rows[e])} is no edge of the graph "
                         "nor a self-loop, so it has no edge features")
    out = torch.zeros(op.nnz, features.shape[1], dtype=torch.float32)
    hit = torch.from_numpy(found)
    out[hit] = features[torch.from_numpy(at[found])]
    if not bool(hit.all()):  # added loops: the mean of their row's edges (PyG's fill_value="mean")
        row = torch.from_numpy(rows)
        sums = torch.zeros(op.shape[0], features.shape[1]).index_add_(0, row[hit], out[hit])
        counts = torch.bincount(row[hit], minlength=op.shape[0]).clamp(min=1).unsqueeze(1)
        out[~hit] = (sums / counts)[row[~hit]]
    return out


def entry_rows(table: torch.Tensor, entries) -> torch.Tensor:
    """Rows ``entries`` (a range or an id array) of an operator's feature table."""
    if isinstance(entries, range):
        return table[entries.start:entries.stop]
    return table[torch.as_tensor(np.asarray(entries), dtype=torch.int64)]
