"""Does the 3D performance model rank grids right? Predicted vs measured grid3d epoch time.

For every X x Y x Z grid of each rank count, `gnnmesh train --strategy grid3d --grid X,Y,Z`
gives the measured epoch time: the median over the epochs after the warm-up (the last one,
which evaluates, left out), and the median (min-max) of those over ``--repeats`` runs,
which go round all grids in turn so that a burst of other load on the machine hits every
grid alike. The model, with rates probed on this machine first (all-reduce bandwidth with as
many processes as the job has ranks, since they share the cores), gives the predicted time.

Reported: both times per grid, the Spearman rank correlation per rank count and over all
runs, and the model's per-rank communication payload against the bytes the strategy
counted (a check that the model moves the blocks the code moves). Ends with a planning
example far beyond this machine.

    python benchmarks/grid3d_model.py --dataset rmat:nodes=100000,edges=1000000 --threads 1
    python benchmarks/grid3d_model.py --nproc 4 --rates rates.json     # rates from 'gnnmesh plan --probe --save-rates'
    python benchmarks/grid3d_model.py --replay out.json   # the runs and rates of an --out file, predicted anew
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

from scipy.stats import spearmanr

from driver import Spread, epochs, spread, train

from gnnmesh.commands.plan_inputs import graph_size
from gnnmesh.layout.grid import Grid, factorizations
from gnnmesh.planner import grid3d as m
from gnnmesh.planner import machine as rates_model


def measure(args, grid: Grid) -> dict:
    """Medians over the kept epochs of one training run: epoch time, rank 0's compute and
    communication time, and the per-rank bytes."""
    flags = ["--strategy", "grid3d", "--grid", f"{grid.x},{grid.y},{grid.z}", "--nproc", grid.size,
             "--dataset", args.dataset, "--epochs", args.epochs, "--hidden", args.hidden, "--layers", args.layers,
             "--dropout", "0", "--eval-every", args.epochs]
    if args.threads:
        flags += ["--threads", args.threads]
    kept = epochs(train(flags, data_root=args.data_root), first=args.warmup, last=1)

    def median(field):
        return spread(kept, field).median
    return {"measured": median("epoch_time"), "compute": median("aggregate_time") + median("dense_time"),
            "comm": median("comm_time"), "bytes": median("bytes_total") / grid.size}


def machine(args, worlds: list) -> tuple:
    """(compute rates, {rank count: network})."""
    if args.rates:
        data = json.loads(Path(args.rates).read_text())
        network = rates_model.Network(**data["network"])
        return rates_model.ComputeRates(**data["compute"]), {world: network for world in worlds}
    from gnnmesh.planner.probe import probe_compute, probe_network
    print("probing SpMM/GEMM/elementwise rates and gloo all-reduce bandwidth ...", flush=True)
    return probe_compute("cpu", args.threads), {world: probe_network(world) for world in worlds}


def replay(path: Path) -> tuple:
    """(rates, networks, runs) of an --out file: each run's epoch time, with the medians of
    the other figures standing for every run's."""
    data = json.loads(path.read_text())
    networks = {int(world): rates_model.Network(**n) for world, n in data["networks"].items()}
    runs = {r["grid"]: [{"measured": t, "compute": r["measured_compute"], "comm": r["measured_comm"],
                         "bytes": r["measured_bytes"]} for t in r["runs"]] for r in data["results"]}
    return rates_model.ComputeRates(**data["rates"]), networks, runs


def collect_runs(args, worlds: list) -> dict:
    """{grid: [measure() of each run]}, the repeats going round all grids in turn."""
    runs: dict = {}
    for repeat in range(args.repeats):
        for world in worlds:
            for grid in factorizations(world):
                got = measure(args, grid)
                runs.setdefault(str(grid), []).append(got)
                print(f"  run {repeat + 1}, {grid}: {got['measured'] * 1e3:.1f} ms", flush=True)
    return runs


def compare(args, work: m.Workload, rates: rates_model.ComputeRates, networks: dict, runs: dict) -> list:
    """One row per grid: the prediction and the median (min-max) over the runs."""
    results = []
    for world, network in networks.items():
        slowdown = max(1.0, world * args.threads / args.cores)   # ranks beyond the cores take turns
        for grid in factorizations(world):
            predicted = m.predict(work, grid, rates.scaled(slowdown), network)
            got = runs[str(grid)]
            measured = spread(got, "measured")
            results.append({"ranks": world, "grid": str(grid), "predicted": predicted.total,
                            "compute": predicted.compute, "comm": predicted.communication,
                            "measured": measured.median, "measured_low": measured.low,
                            "measured_high": measured.high, "measured_compute": spread(got, "compute").median,
                            "measured_comm": spread(got, "comm").median, "model_bytes": m.payload_bytes(work, grid),
                            "measured_bytes": spread(got, "bytes").median, "runs": [r["measured"] for r in got]})
    return results


def print_table(results: list) -> None:
    print("\n| ranks | grid XxYxZ | predicted ms (compute + comm) | measured ms, median (min-max) "
          "| rank 0: compute + comm ms | rank pred / meas | MB per rank model / counted |")
    print("|---|---|---|---|---|---|---|")
    for world in sorted({r["ranks"] for r in results}):
        rows = [r for r in results if r["ranks"] == world]
        pred_rank = {r["grid"]: i for i, r in enumerate(sorted(rows, key=lambda r: r["predicted"]), 1)}
        meas_rank = {r["grid"]: i for i, r in enumerate(sorted(rows, key=lambda r: r["measured"]), 1)}
        for r in sorted(rows, key=lambda r: r["measured"]):
            print(f"| {world} | {r['grid']} | {r['predicted'] * 1e3:.0f} ({r['compute'] * 1e3:.0f} + "
                  f"{r['comm'] * 1e3:.0f}) | {Spread.of(r['runs']).format(0, 1e3)} | "
                  f"{r['measured_compute'] * 1e3:.0f} + {r['measured_comm'] * 1e3:.0f} | "
                  f"{pred_rank[r['grid']]} / {meas_rank[r['grid']]} "
                  f"| {r['model_bytes'] / 1e6:.2f} / {r['measured_bytes'] / 1e6:.2f} |")


def print_correlations(results: list) -> None:
    print()
    worlds = sorted({r["ranks"] for r in results})
    groups = [(f"{w} ranks", [r for r in results if r["ranks"] == w]) for w in worlds]
    if len(worlds) > 1:
        groups.append(("all runs", results))
    for label, rows in groups:
        if len(rows) < 3:
            continue
        rho, p = spearmanr([r["predicted"] for r in rows], [r["measured"] for r in rows])
        print(f"Spearman rho, {label} ({len(rows)} grids): {rho:.3f} (p = {p:.3g})")


def planning_example() -> None:
    work = m.Workload.gcn(nodes=100_000_000, edges=1_000_000_000, features=128, hidden=256, classes=64,
                          layers=3, evaluate=True)
    net = rates_model.Network(intra_bw=200e9, inter_bw=100e9, intra_latency=5e-6, inter_latency=15e-6)
    print("\nPlanning example: GCN 128-256-256-64 on 100M nodes / 1B edges, 4 GPUs per node, nominal GPU "
          "rates, 200 GB/s within a node, 100 GB/s per node between nodes")
    for gpus in (64, 256, 1024):
        ranked = m.rank_grids(work, gpus, machine.GPU_RATES, net, ranks_per_node=4)
        shown = ", ".join(f"{p.grid} {p.total * 1e3:.0f} ms" for p in ranked[:3])
        worst = ranked[-1]
        print(f"  {gpus:>4} GPUs ({len(ranked)} grids): best {shown}; worst {worst.grid} {worst.total * 1e3:.0f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="rmat:nodes=100000,edges=1000000")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--nproc", default="4,8", help="rank counts, comma-separated")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="first epochs left out")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    parser.add_argument("--cores", type=int, default=os.cpu_count(),
                        help="cores the ranks share: compute slows by ranks x threads / cores beyond it")
    parser.add_argument("--repeats", type=int, default=2, help="runs per grid; their median counts")
    parser.add_argument("--rates", help="rates JSON ('gnnmesh plan --probe --save-rates') instead of probing")
    parser.add_argument("--out", help="write the results to this JSON file")
    parser.add_argument("--replay", help="take rates and measurements from an --out file instead of "
                                         "probing and training (to re-predict after a model change)")
    args = parser.parse_args()
    if args.epochs < args.warmup + 2:
        parser.error("--epochs must leave at least one epoch after the warm-up and before the last")

    name, nodes, entries, features, classes = graph_size(args.dataset, args.data_root)
    work = m.Workload.gcn(nodes, entries, features, args.hidden, classes, args.layers)
    worlds = [int(n) for n in args.nproc.split(",")]
    load = os.getloadavg()[0]
    if args.replay:
        rates, networks, runs = replay(Path(args.replay))
        worlds = list(networks)
    else:
        rates, networks = machine(args, worlds)
    print(f"{name}: {nodes:,} nodes, {work.nnz:,} entries with self-loops, GCN {'-'.join(map(str, work.widths))}; "
          f"{args.epochs} epochs, median of {args.epochs - args.warmup - 1}; median (min-max) of {args.repeats} runs")
    print(f"rates: {rates}")
    for world, network in networks.items():
        print(f"network, {world} processes: {network.intra_bw / 1e9:.3f} GB/s, {network.intra_latency * 1e6:.0f} us")

    if not args.replay:
        runs = collect_runs(args, worlds)
        print(f"\nload average (1 min) before: {load:.1f}, after: {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} cores")
    results = compare(args, work, rates, networks, runs)
    print_table(results)
    print_correlations(results)
    if args.out:
        Path(args.out).write_text(json.dumps({"rates": asdict(rates), "results": results,
                                              "networks": {w: asdict(n) for w, n in networks.items()}},
                                             indent=2))
    planning_example()


if __name__ == "__main__":
    main()
