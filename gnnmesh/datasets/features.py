"""Node features computed from the structure alone, for graphs that ship none (LastFM,
PubMed here, email-Eu-core, SNAP and SuiteSparse graphs). Loaders leave ``x=None``;
callers opt in with ``graph.replace(x=structural_features(graph, "degree"))``."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph

KINDS = ("degree", "onehot", "constant", "random")
MAX_ONEHOT_NODES = 50_000  # an identity matrix is N^2 floats: 10 GB at 50k nodes


def structural_features(graph: Graph, kind: str = "degree", *, dim: Optional[int] = None,
                        seed: int = 0) -> torch.Tensor:
    """A float32 ``[num_nodes, F]`` feature matrix.

    - ``degree``: ``log(1 + in-degree)``, plus ``log(1 + out-degree)`` for directed graphs
      (log keeps power-law hubs from dominating)
    - ``onehot``: the identity (a learnable embedding per node); refused above
      MAX_ONEHOT_NODES nodes
    - ``constant``: a column of ones (pure message passing, e.g. for counting tasks)
    - ``random``: seeded standard-normal features of width ``dim`` (default 64)
    """
    n = graph.num_nodes
    if kind == "degree":
        columns = [graph.adj.degrees()]
        if graph.directed:
            indptr_t = graph.adj.transpose_structure()[0]
            columns.append(indptr_t[1:] - indptr_t[:-1])
        return torch.log1p(torch.stack(columns, dim=1).to(torch.float32))
    if kind == "onehot":
        if n > MAX_ONEHOT_NODES:
            raise GraphError(f"{graph.name}: one-hot features for {n} nodes would take "
                             f"{n * n * 4 / 1e9:.1f} GB; use 'degree' or 'random'")
        return torch.eye(n, dtype=torch.float32)
    if kind == "constant":
        return torch.ones(n, 1, dtype=torch.float32)
    if kind == "random":
        width = 64 if dim is None else int(dim)
        rng = np.random.default_rng(seed)
        return torch.from_numpy(rng.standard_normal((n, width), dtype=np.float32))
    raise GraphError(f"unknown structural feature kind '{kind}'; choose one of {', '.join(KINDS)}")
