"""Multilabel node classification, as in ogbn-proteins: every node has T binary targets, the model
one logit per target, trained with binary cross-entropy; models are selected by ROC-AUC (OGB's:
the mean over targets of each target's AUC), and micro-F1 is reported beside it.

The graph is generated (a stochastic block model of 12 communities); target j says whether a
node's community is one of the communities of group j, a random half of them. The task is
inferred from the labels (a 0/1 matrix); ``--task multilabel`` would say so.

It trains on one process through the library, then on two ranks under partition and offload
parallelism through the command line, with the same losses and metrics:

    gnnmesh train --dataset multilabel.npz --strategy partition --nproc 2
    gnnmesh train --dataset multilabel.npz --strategy offload --nproc 2

Run it as ``python examples/multilabel.py`` (a few seconds).
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

TARGETS, EPOCHS = 6, 30


def make_graph():
    """An SBM graph whose labels are a [N, TARGETS] matrix of 0/1 targets."""
    graph = datasets.load("sbm:nodes=600,classes=12,features=16,feature_noise=2.0", cache=False)
    rng = np.random.default_rng(0)
    groups = rng.random((12, TARGETS)) < 0.5  # community c is in group j
    targets = torch.from_numpy(groups[graph.y.numpy()].astype(np.float32))
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
    trainer = Trainer(Config.of(epochs=EPOCHS, seed=1), graph)
    summary = trainer.fit()
    best = trainer.history[summary.best_epoch - 1]
    print(f"one process: task {trainer.task.name}, final loss {summary.final_loss:.4f}, best val ROC-AUC "
          f"{summary.val_acc:.4f} (micro-F1 {best.extra['val_micro_f1']:.4f}), test ROC-AUC {summary.test_acc:.4f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = save_npz(graph, Path(tmp) / "multilabel.npz")
        for strategy in ("partition", "offload"):
            command = [sys.executable, "-m", "gnnmesh", "train", "--dataset", str(path), "--strategy", strategy,
                       "--nproc", "2", "--epochs", str(EPOCHS), "--seed", "1", "--quiet"]
            done = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            print(f"{strategy}, 2 ranks: {done}")


if __name__ == "__main__":
    main()
