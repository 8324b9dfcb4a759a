"""Link prediction: accuracy beside the published graph auto-encoder's, and PyG's recipe run
side by side.

    python benchmarks/link.py --data-root ../shared/data [--seeds 10] [--datasets cora,citeseer]

Two recipes, each over seeds 0..S-1 on every dataset; each row is the mean ± std of the test
ROC-AUC and average precision at the epoch of the best validation selection:

- ``gae``: the graph auto-encoder of Kipf & Welling (2016), Table 1: a GCN encoder 32 -> 16,
  the inner product decoder, binary cross-entropy with one negative per positive, Adam at
  0.01, 200 epochs, 5% of the edges held out to validate and 10% to test, each held-out
  positive against one negative, on the features as the paper took them (the bag of words
  as 0/1, where gnnmesh's loader scales each row to sum 1). gnnmesh runs it; the paper's
  figures stand beside.
- ``pyg``: PyG's ``examples/link_pred.py``: a GCN encoder 128 -> 64, the same decoder and
  loss, 100 epochs, the same split fractions, the model of the best validation AUC. gnnmesh
  runs it (its split and negatives, ``gnnmesh.link``) and PyG runs it (``RandomLinkSplit``
  and ``negative_sampling``), on the same features.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.link.metrics import auc, average_precision
from gnnmesh.link.trainer import LinkTrainer

# The published figures (percent): Kipf & Welling, Variational Graph Auto-Encoders, 2016, Table 1, GAE.
GAE_PAPER = {"cora": (91.0, 92.0), "citeseer": (89.5, 89.9)}
RECIPES = {
    "gae": {"hidden": 32, "embedding_width": 16, "epochs": 200},
    "pyg": {"hidden": 128, "embedding_width": 64, "epochs": 100},
}
SPLIT = {"valid": 0.05, "test": 0.10}


def gnnmesh_run(graph, recipe: dict, seed: int) -> tuple:
    """(test AUC, test AP) at the epoch of the best validation MRR (one negative per positive:
    the share of held-out positives scored above their negative)."""
    config = Config.of(task="link", dataset=graph.name, model="gcn", dropout=0.0, weight_decay=0.0, lr=0.01,
                       seed=seed, eval_negatives=1, hits="1", link_split=f"valid={SPLIT['valid']},test={SPLIT['test']}",
                       **recipe)
    summary = LinkTrainer(config, graph).fit()
    best = summary.history[summary.best_epoch - 1].extra
    return 100 * best["test_auc"], 100 * best["test_ap"]


def pyg_run(graph, recipe: dict, seed: int) -> tuple:
    """PyG's examples/link_pred.py on the same graph and features: (test AUC, test AP) of the
    model with the best validation AUC."""
    import torch_geometric.transforms as T
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import negative_sampling

    torch.manual_seed(seed)
    data = Data(x=graph.x.to_dense().float() if graph.x.layout != torch.strided else graph.x.float(),
                edge_index=graph.edge_index())
    train, val, test = T.RandomLinkSplit(num_val=SPLIT["valid"], num_test=SPLIT["test"], is_undirected=True,
                                         add_negative_train_samples=False)(data)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(data.num_features, recipe["hidden"])
            self.conv2 = GCNConv(recipe["hidden"], recipe["embedding_width"])

        def encode(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    criterion = torch.nn.BCEWithLogitsLoss()

    def scores(part):
        z = model.encode(part.x, part.edge_index)
        src, dst = part.edge_label_index
        return (z[src] * z[dst]).sum(-1)

    best_val, final = -1.0, (float("nan"), float("nan"))
    for _ in range(recipe["epochs"]):
        model.train()
        optimizer.zero_grad()
        negative = negative_sampling(train.edge_index, num_nodes=train.num_nodes,
                                     num_neg_samples=train.edge_label_index.size(1), method="sparse")
        z = model.encode(train.x, train.edge_index)
        pairs = torch.cat([train.edge_label_index, negative], dim=-1)
        labels = torch.cat([train.edge_label, train.edge_label.new_zeros(negative.size(1))])
        loss = criterion((z[pairs[0]] * z[pairs[1]]).sum(-1), labels)
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            measured = []
            for part in (val, test):
                s, y = scores(part).numpy(), part.edge_label.numpy() == 1
                measured.append((auc(s[y], s[~y]), average_precision(s[y], s[~y])))
        if measured[0][0] > best_val:
            best_val, final = measured[0][0], measured[1]
    return 100 * final[0], 100 * final[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--datasets", default="cora,citeseer")
    parser.add_argument("--recipes", default="gae,pyg")
    parser.add_argument("--threads", type=int, default=1, help="compute threads (these graphs are small)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| recipe | dataset | run by | test AUC (mean ± std, {args.seeds} seeds) | test AP | paper AUC / AP | s/run |")
    print("|---|---|---|---|---|---|---|")
    for recipe in args.recipes.split(","):
        for name in args.datasets.split(","):
            graph = datasets.load(name, root=args.data_root)
            if recipe == "gae":  # the paper's features: which words a document holds
                graph = graph.replace(x=(graph.x.to_dense() > 0).float())
            runners = [("gnnmesh", gnnmesh_run)] + ([("PyG", pyg_run)] if recipe == "pyg" else [])
            for who, run in runners:
                start = time.perf_counter()
                results = np.array([run(graph, RECIPES[recipe], seed) for seed in range(args.seeds)])
                per_run = (time.perf_counter() - start) / args.seeds
                paper = GAE_PAPER.get(name) if recipe == "gae" else None
                shown = [f"{statistics.mean(c):.1f} ± {statistics.pstdev(c):.1f}" for c in results.T]
                print(f"| {recipe} | {name} | {who} | {shown[0]} | {shown[1]} | "
                      f"{f'{paper[0]} / {paper[1]}' if paper else '-'} | {per_run:.1f} |", flush=True)


if __name__ == "__main__":
    main()
