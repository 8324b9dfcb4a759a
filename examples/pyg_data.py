"""Train on a PyTorch Geometric ``Data`` object: ``Graph.from_pyg`` takes its ``edge_index``,
``x``, ``y``, masks and edge weights, and checks them as every graph is checked. Here the
``Data`` is PyG's own synthetic node-classification graph, split by PyG's transform; any
``Data`` of yours works the same way.

The graph trains on one process here; on several ranks, give the same graph to each rank's
trainer (every rank builds it alike), or write it once as a graph file and use
``gnnmesh train --dataset FILE --nproc N`` (see the data guide).

    python examples/pyg_data.py
"""

import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import FakeDataset

from gnnmesh import Graph
from gnnmesh.config import Config
from gnnmesh.train import Trainer

torch.manual_seed(0)
data = FakeDataset(num_graphs=1, avg_num_nodes=400, num_channels=16, num_classes=4, task="node",
                   transform=T.RandomNodeSplit(num_val=0.2, num_test=0.2))[0]
graph = Graph.from_pyg(data, name="fake")
print(graph)

summary = Trainer(Config.of(model="sage", epochs=30), graph).fit()
print(f"sage on a PyG Data: best val {summary.val_acc:.3f} at epoch {summary.best_epoch}, test {summary.test_acc:.3f}")
