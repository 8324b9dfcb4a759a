"""GraphConv (Morris et al., AAAI 2019): ``h'_i = W_1 h_i + W_2 sum_{j -> i} h_j + b``, a layer
gnnmesh does not ship, described by its maths rather than by code.

A ``GraphLayer`` says what its layer computes as a sum of terms ``c (A_op H) W^T`` plus a
bias (``Maths``). One description serves every strategy: a single process and the row and
column strategies evaluate it on their views, out-of-core training caches the aggregation
and recomputes only the update, and grid3d lays the terms out as blocks of its 3D grid. So
this model trains under every strategy, mini-batch included.

    gnnmesh train --model examples/graphconv.py:GraphConv --dataset cora --nproc 4 --strategy grid3d
"""

import torch
from torch import nn

from gnnmesh.models import SELF, GraphLayer, LayerStack, Maths, Term


class GraphConvLayer(GraphLayer):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin_root = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def maths(self) -> Maths:
        # "sum" is A itself; SELF is the layer's input (its destinations' rows)
        return Maths((Term("sum", self.lin_neigh.weight), Term(SELF, self.lin_root.weight)), self.lin_root.bias)


class GraphConv(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 32, layers: int = 2, dropout: float = 0.5):
        super().__init__(dropout)
        dims = [in_dim] + [hidden] * (layers - 1) + [num_classes]
        self.layers.extend(GraphConvLayer(i, o) for i, o in zip(dims[:-1], dims[1:]))


if __name__ == "__main__":
    from gnnmesh import datasets
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer

    torch.manual_seed(0)
    graph = datasets.load("cora")
    summary = Trainer(Config.of(epochs=20), graph, model=GraphConv(graph.num_features, graph.num_classes)).fit()
    print(f"GraphConv on cora: best val {summary.val_acc:.3f}, test {summary.test_acc:.3f}")
