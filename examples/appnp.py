"""APPNP-style propagation with a learned MLP (Gasteiger, Bojchevski and Günnemann, ICLR 2019),
written as a plain ``nn.Module`` on the GraphView primitives: no layer stack, no maths
description, just ``view.spmm`` in a loop,

    H_0 = MLP(X),   H_{k+1} = (1 - alpha) Â H_k + alpha H_0.

A strategy that runs the model whole on its own view runs it as it is (single, partition,
tensor); one that takes a model apart into layers or stages refuses it when the model is
built, naming what it needs (grid3d, offload, mini-batch). gnnmesh's own decoupled models
(``--decoupled``) are this model with that structure declared.

    gnnmesh train --model examples/appnp.py:APPNPNet --model-args k=5,alpha=0.2 --dataset cora --nproc 2 --strategy tensor
"""

import torch
from torch import nn


class APPNPNet(nn.Module):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, k: int = 10, alpha: float = 0.1,
                 dropout: float = 0.5):
        super().__init__()
        self.k, self.alpha, self.dropout = k, alpha, dropout
        self.lin1 = nn.Linear(in_dim, hidden)
        self.lin2 = nn.Linear(hidden, num_classes)

    def forward(self, view, x):
        h = torch.relu(self.lin1(view.dropout(x, self.dropout, self.training)))
        h0 = self.lin2(view.dropout(h, self.dropout, self.training))
        h = h0
        for _ in range(self.k):
            h = (1 - self.alpha) * view.spmm(h, "gcn") + self.alpha * h0
        return h


if __name__ == "__main__":
    from gnnmesh import datasets
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer

    graph = datasets.load("cora")
    summary = Trainer(Config.of(epochs=20), graph, model=APPNPNet(graph.num_features, graph.num_classes)).fit()
    print(f"APPNP on cora: best val {summary.val_acc:.3f}, test {summary.test_acc:.3f}")
