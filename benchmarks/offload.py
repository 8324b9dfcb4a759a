"""Out-of-core training (--strategy offload): deduplicated traffic, epoch time and memory.

    python benchmarks/offload.py --data-root ../shared/data \
        [--datasets github,facebook,slashdot:random_labels=8,rmat:nodes=1000000,edges=10000000]
        [--ratio 4] [--ranks 4] [--epochs 4] [--store ram] [--timeout 3600]

For every graph the budget is the host tier (all layers' vertex data, gradients and cached
aggregates of a 2-layer GCN) divided by ``--ratio``, or 5% over the smallest budget any plan
fits in when that is more (a hub's neighbourhood at the widest layer), and K is what
``--chunks auto`` picks for it. Then:

* traffic (HongTu Table 8), from the plan: alpha, host -> fast bytes per epoch without dedup
  and with each mode on ``--ranks`` ranks (a METIS partition, as HongTu), and the saving.
  The training counters equal these predictions exactly (tests/parallel/offload/test_strategy.py);
* time, measured side by side: the in-memory single process and offload on one rank at that
  budget, the median epoch (first epoch left out) and the range, and their ratio;
* memory: offload's measured fast-tier peak (resident memory above the setup's) against the budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver import TrainFailed, epochs, out_of_core_parser, split_specs, spread, train  # noqa: E402

from gnnmesh import datasets  # noqa: E402
from gnnmesh.commands.plan_offload import host_bytes  # noqa: E402
from gnnmesh.models import build_model  # noqa: E402
from gnnmesh.parallel.offload import Plan, build_plan  # noqa: E402
from gnnmesh.parallel.offload.pipeline import stages_of  # noqa: E402
from gnnmesh.parallel.offload.plan import epoch_traffic, footprint_floor  # noqa: E402

MiB = 2**20
MODES = ("none", "inter", "intra", "both")
DEFAULT = "github,facebook,slashdot:random_labels=8,rmat:nodes=1000000,edges=10000000"


def plans(spec: str, root, ratio: float, ranks: int) -> dict:
    """The budget for ``ratio`` and the traffic of every dedup mode on ``ranks`` ranks."""
    graph = datasets.load(spec, root=root)
    in_dim = graph.num_features or (2 if graph.directed else 1)
    stages = stages_of(build_model("gcn", in_dim, graph.num_classes), in_dim)
    whole = [np.arange(graph.num_nodes)]
    host = host_bytes(Plan(graph.adj, whole, 1, "both", False, 0, in_dim), stages)[0]
    # A budget must hold the largest chunk's working set: a hub row's neighbourhood at the
    # widest layer sets a floor (wide input features raise it); below it no plan works.
    floor = footprint_floor(graph.adj, [np.arange(graph.num_nodes)], stages, graph.num_classes, 1,
                                  in_dim, "both")
    budget = max(int(host / ratio), int(1.05 * floor))
    single = build_plan(adj=graph.adj, owned=whole, rank=0, in_dim=in_dim, stages=stages, classes=graph.num_classes,
                        heads=1, budget=budget, chunks=None, dedup="both", reorganize=True)
    from gnnmesh import partition
    assignment = np.asarray(partition.partition(graph, ranks, "gp").assignment)
    owned = [np.flatnonzero(assignment == r) for r in range(ranks)]
    # The budget is per rank (each GPU's memory): the ranks' K is the one it fits with "both".
    k = build_plan(adj=graph.adj, owned=owned, rank=0, in_dim=in_dim, stages=stages, classes=graph.num_classes,
                   heads=1, budget=budget, chunks=None, dedup="both", reorganize=False).k
    rows = {}
    for mode in MODES:
        for reorganized in (False, True):
            plan = Plan(graph.adj, owned, k, mode, reorganized, 0, in_dim)
            rows[mode, reorganized] = epoch_traffic(plan, stages).total("load")
            alpha = plan.replication()
    return {"graph": graph, "host": host, "budget": budget, "k": single.k, "k_ranks": k, "alpha": alpha,
            "load": rows}


def timing(spec: str, root, budget: int, store: str, epochs_: int, timeout: float) -> dict:
    """Epoch times of the in-memory single process and of offload at ``budget``, run one
    after the other on the same machine."""
    common = ["--dataset", spec, "--epochs", epochs_, "--threads", 2]
    out = {}
    for name, flags in (("memory", []), ("offload", ["--strategy", "offload", "--device-memory", f"{budget}B",
                                                     "--host-store", store]
                                          + (["--store-dir", "offload-bench-store"] if store == "file" else []))):
        try:
            out[name] = epochs(train(common + flags, timeout=timeout, data_root=root), first=1)
        except TrainFailed as err:
            out[name] = str(err)
    return out


def main() -> None:
    args = out_of_core_parser(__doc__, DEFAULT, 4, "ranks for the traffic table (default 4)",
                              "host tier / budget (default 4)").parse_args()
    print(f"offload benchmark: GCN 2 layers, budget = host tier / {args.ratio:g}, traffic on {args.ranks} "
          f"ranks (METIS), times on 1 rank, {args.store} store\n")
    print("traffic per epoch, host -> fast MiB (reorganized in brackets); saving = 1 - both / none")
    print(f"{'graph':<38} {'K':>5} {'alpha':>6} " + " ".join(f"{m:>17}" for m in MODES) + f" {'saving':>8}"
          f"   (K: chunks per rank on {args.ranks} ranks)")
    results = []
    for spec in split_specs(args.datasets):
        p = plans(spec, args.root, args.ratio, args.ranks)
        load = p["load"]
        cells = " ".join(f"{load[m, False] / MiB:>8.1f} [{load[m, True] / MiB:>6.1f}]" for m in MODES)
        best = min(load["both", False], load["both", True])
        print(f"{spec:<38} {p['k_ranks']:>5} {p['alpha']:>6.2f} {cells} {100 * (1 - best / load['none', False]):>7.1f}%")
        results.append((spec, p))
    print("\nepoch time, s: median (range) over epochs after the first; peak = fast-tier peak / budget")
    print(f"{'graph':<38} {'budget MiB':>10} {'host/budget':>11} {'K':>5} {'in-memory':>20} {'offload':>20} "
          f"{'ratio':>6} {'peak/budget':>12}")
    for spec, p in results:
        t = timing(spec, args.root, p["budget"], args.store, args.epochs, args.timeout)
        mem, off = t["memory"], t["offload"]
        if isinstance(mem, str) or isinstance(off, str):
            print(f"{spec:<38} failed: {mem if isinstance(mem, str) else off}")
            continue
        ratio = spread(off, "epoch_time").median / spread(mem, "epoch_time").median
        peak = max(r["fast_peak_bytes_max"] for r in off) / p["budget"]
        print(f"{spec:<38} {p['budget'] / MiB:>10.1f} {p['host'] / p['budget']:>11.1f} {p['k']:>5} "
              f"{str(spread(mem, 'epoch_time')):>20} {str(spread(off, 'epoch_time')):>20} {ratio:>6.2f} "
              f"{peak:>12.2f}")


if __name__ == "__main__":
    main()
