"""SNAP graphs: email-Eu-core (directed, with department labels) and soc-Slashdot0902
(directed, unlabeled). Directed graphs keep the file's edges exactly, self-loops
included; ``as_undirected=True`` gives the undirected simple graph instead (reverse
edges added, duplicates merged, self-loops dropped)."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph
from ._build import adjacency_from_edges, random_split
from ._io import read_bytes
from ._text import parse_table
from .files import load_edge_list


def load_email_eu_core(files: dict, *, as_undirected=False, split_seed=0, train_frac=0.6,
                       val_frac=0.2):
    labels = parse_table(read_bytes(files["labels"]), files["labels"], columns=(2,),
                         names=("node id", "department"))
    if len(labels) == 0:
        raise GraphError(f"{files['labels']}: no labels")
    nodes, dept = labels.ints[:, 0], labels.ints[:, 1]
    for values, what in ((nodes, "node id"), (dept, "department")):
        if values.min() < 0:
            raise labels.error(int(np.argmin(values)), f"negative {what} {int(values.min())}")
    n = int(nodes.max()) + 1
    if np.unique(nodes).size != nodes.size or nodes.size != n:
        raise GraphError(f"{files['labels']}: expected one label line for each node 0..{n - 1}")
    y = np.empty(n, dtype=np.int64)
    y[nodes] = dept

    edges = parse_table(read_bytes(files["edges"]), files["edges"], columns=(2,))
    if len(edges) == 0:
        raise GraphError(f"{files['edges']}: no edges")
    bad = np.flatnonzero((edges.ints < 0).any(1) | (edges.ints >= n).any(1))
    if bad.size:
        row = int(bad[0])
        raise edges.error(row, f"node id out of range for the {n} labeled nodes: "
                               f"{edges.ints[row].tolist()}")
    src, dst = edges.ints[:, 0], edges.ints[:, 1]
    adj = adjacency_from_edges(src, dst, n, symmetrize=as_undirected,
                               drop_self_loops=as_undirected)
    masks, split = random_split(n, y, train_frac, val_frac, split_seed)
    meta = {"source": "SNAP email-Eu-core", "split": split,
            "self_loops": int(np.count_nonzero(src == dst)), "as_undirected": as_undirected}
    return Graph.from_adjacency(adj, source="email-eu-core", directed=not as_undirected,
                      y=torch.from_numpy(y), name="email-eu-core", num_classes=int(y.max()) + 1,
                      meta=meta, **masks)


def load_slashdot(files: dict, *, as_undirected=False):
    graph = load_edge_list(files["edges"], directed=False if as_undirected else True,
                           remove_self_loops=as_undirected)
    graph.name = "slashdot"
    graph.meta.update(source="SNAP soc-Slashdot0902", as_undirected=as_undirected)
    return graph
