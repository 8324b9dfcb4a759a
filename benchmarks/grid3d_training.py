"""3D tensor parallelism (grid3d) against 1D partitioning and tensor parallelism, side by side.

For each rank count N, every configuration is one ``gnnmesh train --nproc N`` run:

1. grid3d on every X x Y x Z grid of N ranks (double permutation on, one row block);
2. on the fastest of those grids, once with the double permutation off and once with
   blocked aggregation (``--blocks B``) on;
3. ``--strategy partition --partitioner hp`` (or ``--partitioner``) and ``--strategy tensor``.

Every epoch trains and evaluates (``--eval-every 1``), so epochs do the same work; the first
``--warmup`` ones are left out and the table shows, over the rest, the epoch time and the
compute time max/min over ranks as median (min-max), and the bytes moved per epoch; time
and bytes also relative to the partition run at the same N (medians, measured in the same
invocation). It also names the grid the
performance model ranks first (``gnnmesh plan``: with its nominal GPU rates, and with
``--probe`` also with rates measured here) and the grid3d default when no ``--grid`` is given.

    python benchmarks/grid3d_training.py                     # R-MAT 10M edges, 4 and 8 ranks
    python benchmarks/grid3d_training.py --nproc 8 --epochs 5 --dataset products --data-root DIR

Partitions are cached; ``gnnmesh partition --dataset D --parts N --method hp`` computes
them ahead of time (mt-KaHyPar may take long on a large graph), so that a run's setup does not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import driver
from driver import epochs, imbalance, spread
from gnnmesh.commands import plan_inputs
from gnnmesh.layout.grid import factorizations, most_cubic_grid
from gnnmesh.planner.grid3d import Workload, rank_grids
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES


def grid_name(grid) -> str:
    return "x".join(str(grid[a]) for a in "xyz")


def grid3d_flags(grid, permute: bool, blocks: int) -> list:
    return ["--strategy", "grid3d", "--grid", ",".join(str(grid[a]) for a in "xyz"),
            "--permute" if permute else "--no-permute", "--blocks", str(blocks)]


def train(args, nproc: int, flags: list) -> dict:
    """Median (min-max) of one run's measured epochs, or ``{"error": why}``."""
    common = ["--dataset", args.dataset, "--nproc", nproc, "--model", "gcn", "--hidden", args.hidden,
              "--epochs", args.epochs, "--eval-every", "1", "--threads", "1"]
    try:
        records = epochs(driver.train(common + flags, timeout=args.timeout, data_root=args.data_root),
                         first=args.warmup)
    except driver.TrainFailed as err:
        return {"error": str(err)}
    return {"epoch": spread(records, "epoch_time"), "mib": spread(records, "bytes_total").median / 2**20,
            "balance": spread(records, imbalance)}


def model_pick(args, nproc: int, machine) -> str:
    """The grid ``gnnmesh plan`` ranks first for this graph and model."""
    _, nodes, entries, features, classes = plan_inputs.graph_size(args.dataset, args.data_root)
    work = Workload.gcn(nodes, entries, features, args.hidden, classes, 2, evaluate=True)
    best = rank_grids(work, nproc, *machine)[0].grid
    return grid_name({"x": best.x, "y": best.y, "z": best.z})


def measure(args, nproc: int) -> list:
    """[(name, grid or "", result)] for one rank count, in the order run."""
    rows = []

    def run(name, grid, flags):
        start = time.perf_counter()
        result = train(args, nproc, flags)
        rows.append((name, grid, result))
        took = f"{result['epoch']} s/epoch" if "error" not in result else result["error"]
        print(f"  {nproc} ranks, {name} {grid}".rstrip() + f": {took} ({time.perf_counter() - start:.0f} s in all)",
              file=sys.stderr, flush=True)
        return result

    run(f"partition {args.partitioner}", "", ["--strategy", "partition", "--partitioner", args.partitioner])
    run("tensor", "", ["--strategy", "tensor"])
    grids = [{"x": g.x, "y": g.y, "z": g.z} for g in factorizations(nproc)]
    swept = {grid_name(g): run("grid3d", grid_name(g), grid3d_flags(g, True, 1)) for g in grids}
    timed = [g for g in grids if "error" not in swept[grid_name(g)]]
    if timed:
        best = min(timed, key=lambda g: swept[grid_name(g)]["epoch"].median)
        for permute, blocks in ((False, 1), (True, args.blocks)):  # one switch at a time
            label = f"grid3d{'' if permute else ', no permutation'}{f', {blocks} blocks' if blocks > 1 else ''}"
            run(label, grid_name(best), grid3d_flags(best, permute, blocks))
    return rows


def table(nproc: int, rows: list, picks: dict) -> list:
    base = rows[0][2] if "error" not in rows[0][2] else None  # the partition run
    value = (lambda r, key: r[key].median if key == "epoch" else r[key])
    ratio = (lambda r, key: f"{value(r, key) / value(base, key):.2f}x" if base else "-")
    out = []
    for name, grid, r in rows:
        notes = ", ".join(who for who, g in picks.items() if g == grid and name == "grid3d")
        label = f"{name} {grid}".rstrip() + (f" ({notes})" if notes else "")
        if "error" in r:
            out.append(f"| {nproc} | {label} | failed: {r['error']} | | | | |")
            continue
        out.append(f"| {nproc} | {label} | {r['epoch']} | {ratio(r, 'epoch')} | {r['mib']:.1f} | "
                   f"{ratio(r, 'mib')} | {r['balance']} |")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=1000000,edges=10000000,features=32")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--nproc", default="4,8", help="comma-separated rank counts")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="first epochs left out of the medians")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--blocks", type=int, default=4, help="row blocks for the blocked-aggregation runs")
    parser.add_argument("--partitioner", default="hp", help="partitioner of the 1D baseline (hp, gp, rp)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed to one training run")
    parser.add_argument("--probe", action="store_true",
                        help="rank the model's grids with rates measured on this machine")
    args = parser.parse_args()
    if args.epochs <= args.warmup:
        parser.error("--epochs must exceed --warmup")

    machines = {"model's pick": (GPU_RATES, GPU_NETWORK)}
    if args.probe:
        from gnnmesh.planner.probe import probe_compute, probe_network
        machines["model's pick, probed"] = (probe_compute("cpu", 1), probe_network())
    lines = []
    start = time.perf_counter()
    for nproc in map(int, args.nproc.split(",")):
        picks = {who: model_pick(args, nproc, machine) for who, machine in machines.items()}
        picks["default"] = grid_name(most_cubic_grid(nproc).dims())
        lines += table(nproc, measure(args, nproc), picks)
    print(f"{args.dataset}: GCN, hidden {args.hidden}, {args.epochs} epochs ({args.warmup} warm-up; median "
          f"(min-max) of the rest), 1 thread per rank; grids X x Y x Z; {time.perf_counter() - start:.0f} s in all\n")
    base = f"vs. partition {args.partitioner}"
    print(f"| ranks | configuration | epoch (s) | {base} | MiB per epoch | {base} | compute max/min |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
