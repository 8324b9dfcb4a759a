"""Tensor parallelism with the vertex data in the host store, against tensor parallelism in memory.

    python benchmarks/tensor_host_store.py --data-root ../shared/data \
        [--datasets github,rmat:nodes=1000000,edges=10000000] [--ranks 2] [--ratio 4]
        [--epochs 4] [--store ram] [--timeout 3600]

A decoupled GCN (APPNP, k = 10) on ``--ranks`` ranks. Each rank's budget is its share of the
host tier (the features, and every propagation step's columns and their gradients) divided
by ``--ratio``, or the smallest budget the run accepts when that is more. Side by side, one
after the other: ``--strategy tensor`` in memory and with ``--host-store``, the median epoch
(first epoch left out) and the range, their ratio, the host store's bytes per epoch (the
training counters equal the plan's prediction exactly: tests/parallel/tensor/test_host_store.py) and
the measured fast-tier peak against the budget.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver import TrainFailed, epochs, out_of_core_parser, split_specs, spread, train  # noqa: E402

from gnnmesh import datasets  # noqa: E402
from gnnmesh.validate import parse_bytes  # noqa: E402

MiB = 2**20
K = 10
DEFAULT = "github,rmat:nodes=1000000,edges=10000000"


def host_tier(spec: str, root) -> int:
    """All ranks' host tier: the features, and 2k tables of the classes' width (H_0 and the
    steps before the last, each with its gradient)."""
    graph = datasets.load(spec, root=root)
    features = graph.num_features or (2 if graph.directed else 1)
    return graph.num_nodes * (features + 2 * K * graph.num_classes) * 4


def run(common: list, budget: int, store: str, timeout: float, root):
    """Host-store epochs at ``budget`` (raised to what the run names when it is too small)."""
    flags = ["--host-store", store] + (["--store-dir", "tensor-bench-store"] if store == "file" else [])
    try:
        return budget, train(common + flags + ["--device-memory", f"{budget}B"], timeout, root)
    except TrainFailed as err:
        named = re.search(r"give at least ([\d.]+ [KMGT]?i?B)", str(err))
        if not named:
            raise
        budget = parse_bytes(named.group(1), "budget")
        return budget, train(common + flags + ["--device-memory", f"{budget}B"], timeout, root)


def main() -> None:
    args = out_of_core_parser(__doc__, DEFAULT, 2, "ranks (default 2)",
                              "a rank's host tier / its budget (default 4)").parse_args()
    print(f"tensor parallelism, decoupled GCN (k={K}), {args.ranks} ranks: in memory vs {args.store} host store, "
          f"budget = a rank's host tier / {args.ratio:g}\n")
    print("epoch time, s: median (range) over epochs after the first; peak = fast-tier peak / budget")
    print(f"{'graph':<34} {'budget MiB':>10} {'K':>4} {'rows':>5} {'in memory':>20} {'host store':>20} "
          f"{'ratio':>6} {'host->fast MiB':>14} {'peak/budget':>11}")
    for spec in split_specs(args.datasets):
        common = ["--dataset", spec, "--strategy", "tensor", "--decoupled", "--model", "gcn", "--k", K,
                  "--nproc", args.ranks, "--epochs", args.epochs, "--threads", 1]
        budget = int(host_tier(spec, args.root) / args.ranks / args.ratio)
        try:
            memory = epochs(train(common, timeout=args.timeout, data_root=args.root), first=1)
            budget, stored = run(common, budget, args.store, args.timeout, args.root)
        except TrainFailed as err:
            print(f"{spec:<34} failed: {err}")
            continue
        stored = epochs(stored, first=1)
        ratio = spread(stored, "epoch_time").median / spread(memory, "epoch_time").median
        last = stored[-1]
        peak = max(r["fast_peak_bytes_max"] for r in stored) / budget
        print(f"{spec:<34} {budget / MiB:>10.1f} {last['chunks']:>4} {last['row_chunks']:>5} "
              f"{str(spread(memory, 'epoch_time')):>20} {str(spread(stored, 'epoch_time')):>20} {ratio:>6.2f} "
              f"{last['offload_load_bytes'] / MiB:>14.1f} {peak:>11.2f}")


if __name__ == "__main__":
    main()
