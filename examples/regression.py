"""Node regression: every node has a numeric target, the model one output per target, trained
with the mean squared error (``--regression-loss mae``: the mean absolute error); models are
selected by R² (1 - residual / total sum of squares, averaged over targets), and MAE and MSE
are reported beside it.

The graph is generated (a stochastic block model of 8 communities, each with a value); a node's
two targets are the mean value of its neighbours' communities and its own community's value
plus noise: what a GNN can learn from the features (noisy community means) and the edges. The
task is inferred from the labels (floats); ``--task regression`` would say so.

It trains on one process through the library, then on two ranks under partition and offload
parallelism through the command line, with the same losses and metrics:

    gnnmesh train --dataset regression.npz --strategy partition --nproc 2
    gnnmesh train --dataset regression.npz --strategy offload --nproc 2

Run it as ``python examples/regression.py`` (a few seconds).
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.train import Trainer

EPOCHS = 60


def make_graph():
    """An SBM graph whose labels are a [N, 2] matrix of float targets."""
    graph = datasets.load("sbm:nodes=600,classes=8,features=16,feature_noise=1.0", cache=False)
    rng = np.random.default_rng(0)
    value = rng.normal(0.0, 2.0, 8)[graph.y.numpy()]          # each node's community value
    adj = graph.adj.to_scipy()
    degree = np.maximum(np.asarray(adj.sum(axis=1)).ravel(), 1.0)
    neighbours = adj @ value / degree                          # the mean over its in-neighbours
    own = value + rng.normal(0.0, 0.3, len(value))
    targets = torch.from_numpy(np.stack([neighbours, own], axis=1).astype(np.float32))
    return graph.replace(y=targets)


def save_npz(graph, path: Path) -> Path:
    """``graph`` as a gnn-benchmark .npz file (what ``--dataset FILE.npz`` reads), its split included."""
    adj = graph.adj.to_scipy().T.tocsr()  # the file's rows are sources
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=np.array(adj.shape),
             attr_matrix=graph.x.numpy(), labels=graph.y.numpy(), train_mask=graph.train_mask.numpy(),
             val_mask=graph.val_mask.numpy(), test_mask=graph.test_mask.numpy())
    return path


def main():
    graph = make_graph()
    print(graph)
    trainer = Trainer(Config.of(epochs=EPOCHS, seed=1, dropout=0.0), graph)
    summary = trainer.fit()
    best = trainer.history[summary.best_epoch - 1]
    print(f"one process: task {trainer.task.describe()}, final loss {summary.final_loss:.4f}, best val R2 "
          f"{summary.val_acc:.4f} (MAE {best.extra['val_mae']:.4f}), test R2 {summary.test_acc:.4f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = save_npz(graph, Path(tmp) / "regression.npz")
        for strategy in ("partition", "offload"):
            command = [sys.executable, "-m", "gnnmesh", "train", "--dataset", str(path), "--strategy", strategy,
                       "--nproc", "2", "--epochs", str(EPOCHS), "--seed", "1", "--dropout", "0", "--quiet"]
            done = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            print(f"{strategy}, 2 ranks: {done}")


if __name__ == "__main__":
    main()
