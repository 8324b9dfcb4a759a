"""GATv2 (Brody, Alon and Yahav, ICLR 2022), a model gnnmesh does not ship, written on the
GraphView primitives. GAT scores an edge as ``a . LeakyReLU(W h_i || W h_j)`` split into two
dot products; GATv2 applies the weight vector after the nonlinearity,

    e_ij = a . LeakyReLU(W_dst h_i + W_src h_j),

which needs the summed vector of every edge: one ``sddmm(..., "add")`` of [N, heads, width]
rows, then a dot product per edge.

Train it under any strategy whose contract it meets (single, partition, tensor, offload, and
the mini-batch strategies gdp and dnp):

    gnnmesh train --model examples/gatv2.py:GATv2 --dataset cora --nproc 3 --strategy partition
    gnnmesh train --model examples/gatv2.py:GATv2 --model-args hidden=16,heads=4 --dataset cora

Run as a script, it trains on Cora for a few epochs on one process.
"""

import torch
import torch.nn.functional as F
from torch import nn

from gnnmesh.models import LayerStack


class GATv2Layer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool, negative_slope: float = 0.2):
        super().__init__()
        self.heads, self.out_dim, self.concat, self.negative_slope = heads, out_dim, concat, negative_slope
        self.lin_src = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.lin_dst = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att = nn.Parameter(torch.empty(heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        for p in (self.lin_src.weight, self.lin_dst.weight, self.att):
            nn.init.xavier_uniform_(p)

    @property
    def out_features(self) -> int:
        return self.heads * self.out_dim if self.concat else self.out_dim

    def forward(self, view, h):
        src = self.lin_src(h).view(-1, self.heads, self.out_dim)
        dst = self.lin_dst(h).view(-1, self.heads, self.out_dim)
        # per edge (i <- j) of A + I: W_dst h_i + W_src h_j, [edges, heads, width]
        summed = view.sddmm(dst, src, "loop", "add")
        scores = (F.leaky_relu(summed, self.negative_slope) * self.att).sum(-1)
        alpha = view.edge_softmax(scores, "loop")
        out = view.spmm(src, "loop", values=alpha)
        out = out.reshape(-1, self.heads * self.out_dim) if self.concat else out.mean(dim=1)
        return out + self.bias


class GATv2(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 8, heads: int = 8, layers: int = 2,
                 dropout: float = 0.6):
        super().__init__(dropout, activation=F.elu)
        dim = in_dim
        for _ in range(layers - 1):
            self.layers.append(GATv2Layer(dim, hidden, heads, concat=True))
            dim = hidden * heads
        self.layers.append(GATv2Layer(dim, num_classes, 1, concat=False))


if __name__ == "__main__":
    from gnnmesh import datasets
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer

    graph = datasets.load("cora")
    model = GATv2(graph.num_features, graph.num_classes)
    summary = Trainer(Config.of(epochs=20, lr=0.005), graph, model=model).fit()
    print(f"GATv2 on cora: best val {summary.val_acc:.3f}, test {summary.test_acc:.3f}")
