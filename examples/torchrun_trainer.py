"""Train from a script that ``torchrun`` (or ``srun torchrun``) starts once per rank: the
``Trainer`` joins the job the launcher describes, each rank holds only its own part of the
graph, and the result equals the single process's.

    torchrun --nproc-per-node 2 examples/torchrun_trainer.py [LOSSES.json [SEED]]

Run as a plain script, it trains on one process. Every rank starts from rank 0's
parameters, whatever torch seed each rank set before it built the model: rank 0's seed
decides them, as the single process's does.
"""

import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

from gnnmesh.config import Config
from gnnmesh.datasets import load
from gnnmesh.train import Trainer


class TwoLayerGCN(nn.Module):
    """A model of your own, written on the view's primitives (``docs/guides/models.md``)."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 16, dropout: float = 0.5):
        super().__init__()
        self.first, self.second, self.dropout = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes), dropout

    def forward(self, view, x):
        x = view.dropout(x, self.dropout, self.training)  # the same mask on every rank count
        x = F.relu(view.spmm(self.first(x), "gcn"))
        x = view.dropout(x, self.dropout, self.training)
        return view.spmm(self.second(x), "gcn")


def main(losses_file=None, seed="0") -> None:
    graph = load("cora")  # every rank may load it: the trainer keeps only this rank's rows
    config = Config.of(strategy="partition", partitioner="rp", epochs=5, lr=0.01)
    torch.manual_seed(int(seed))
    model = TwoLayerGCN(graph.num_features, graph.num_classes)
    trainer = Trainer(config, graph, model=model)  # joins torchrun's job: one rank of it
    summary = trainer.fit()
    if trainer.strategy.rank == 0:  # every rank has the same numbers; one reports them
        print(f"{trainer.strategy.world_size} ranks: loss {summary.final_loss:.4f}, "
              f"test accuracy {summary.test_acc:.3f}")
        if losses_file:
            with open(losses_file, "w") as out:
                json.dump([epoch.loss for epoch in summary.history], out)


if __name__ == "__main__":
    main(*sys.argv[1:])
