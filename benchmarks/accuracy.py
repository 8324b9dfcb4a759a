"""Test accuracy on the standard Planetoid splits, mean and std over seeds, beside the
numbers the models' papers report.

    python benchmarks/accuracy.py --data-root ../shared/data [--seeds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.train import Trainer

# (model, decoupled, dataset, paper's accuracy, our target)
CASES = [
    ("gcn", False, "cora", 81.5, 80.5),
    ("gcn", False, "citeseer", 70.3, 69.5),
    ("gat", False, "cora", 83.0, 82.0),
    ("sage", False, "cora", None, None),
    ("gin", False, "cora", None, None),
    ("decoupled", False, "cora", 83.3, None),  # APPNP's Cora figure uses another split; shown for reference
    # Decoupled forms (what tensor-decoupled trains): at most 1.5 points below the coupled GCN.
    ("gcn", True, "cora", None, None),
    ("gcn", True, "citeseer", None, None),
    ("gat", True, "cora", None, None),
    ("gat", True, "citeseer", None, None),
]
DECOUPLED_TOLERANCE = 1.5


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--models", default=",".join(sorted({c[0] for c in CASES})))
    parser.add_argument("--threads", type=int, default=1, help="compute threads (these graphs are small)")
    parser.add_argument("--decoupled-only", action="store_true", help="only the decoupled forms")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wanted = set(args.models.split(","))

    print(f"| model | dataset | test accuracy (mean ± std, {args.seeds} seeds) | paper | target | s/run |")
    print("|---|---|---|---|---|---|")
    failed, coupled_gcn = [], {}
    for model, decoupled, name, paper, target in CASES:
        if model not in wanted or (args.decoupled_only and not decoupled):
            continue
        graph = datasets.load(name, root=args.data_root)
        accs, start = [], time.perf_counter()
        for seed in range(args.seeds):
            config = Config(dataset=name, model=model, decoupled=decoupled, seed=seed, epochs=args.epochs)
            accs.append(100 * Trainer(config, graph).fit().test_acc)
        mean, std = statistics.mean(accs), statistics.pstdev(accs)
        per_run = (time.perf_counter() - start) / args.seeds
        ok = target is None or mean >= target
        if model == "gcn" and not decoupled:
            coupled_gcn[name] = mean
        if decoupled and name in coupled_gcn:
            target = f"≥ GCN {coupled_gcn[name]:.1f} − {DECOUPLED_TOLERANCE}"
            ok = mean >= coupled_gcn[name] - DECOUPLED_TOLERANCE if model == "gcn" else True
            target = target if model == "gcn" else None
        model = f"{model} (decoupled)" if decoupled else model
        failed += [] if ok else [f"{model}/{name}"]
        print(f"| {model} | {name} | {mean:.1f} ± {std:.1f} | {paper if paper else '-'} | "
              f"{_target(target)} | {per_run:.1f} |", flush=True)
    if failed:
        print("below target:", ", ".join(failed))


def _target(target) -> str:
    if target is None:
        return "-"
    return target if isinstance(target, str) else f"≥ {target}"


if __name__ == "__main__":
    main()
