"""Does the planner choose well? Every full-graph candidate measured, on held-out configurations.

Two sets of configurations (graph, model, hidden width, ranks): a calibration set and a
held-out set of 24 (three real graphs, widths 32 and 256, 2 and 4 ranks, gcn and gat; GAT
runs 4 heads of width/4). For each, the planner ranks every candidate (partition under rp, gp
and hp, tensor, every grid3d grid for gcn) and each candidate is trained for ``--epochs``
epochs with `gnnmesh train` as a user runs it, one job at a time; its time is the median
epoch after ``--warmup`` (every epoch trains and evaluates, as the models assume).

The rates: this machine's probe (compute with one thread, gloo links among as many
processes as the job has ranks), slowed where ranks share cores, as `--strategy auto` takes
them. They are then calibrated on the calibration set alone (``gnnmesh.planner.calibrate``:
a factor each for sparse, dense and link costs, and a fixed cost per epoch) and frozen; the
held-out set is predicted with the frozen rates. Per held-out configuration: the choice (the
best predicted epoch; partitioning time is left out, as the measured epochs leave it out),
the measured best, the regret t(chosen) / t(best), the Spearman rank correlation of
predicted and measured times, and the median absolute error of the prediction.

    python benchmarks/planner.py --data-root DIR --out planner.json --save-rates rates.json
    python benchmarks/planner.py --replay planner.json      # the analysis again, no training
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from scipy.stats import spearmanr

from driver import TrainFailed, epochs, train

from gnnmesh import datasets
from gnnmesh.planner import calibrate
from gnnmesh.planner import rates as machine_rates
from gnnmesh.planner.machine import ComputeRates, Network
from gnnmesh.partition.registry import names as partitioner_names
from gnnmesh.planner.rank import input_width, rank_strategies

HEADS = 4
GOAL = 1.10   # regret within 10%


@dataclass(frozen=True)
class Case:
    graph: str
    model: str
    width: int
    ranks: int

    def __str__(self) -> str:
        return f"{self.graph} {self.model} {self.width} P={self.ranks}"

    def options(self) -> dict:
        return {"heads": HEADS} if self.model == "gat" else {}

    def hidden(self) -> int:
        return self.width // HEADS if self.model == "gat" else self.width


def cases(graphs, widths, ranks=(2, 4), models=("gcn", "gat")) -> list:
    return [Case(g, m, w, p) for g in graphs for w in widths for p in ranks for m in models]


CALIBRATION = cases(("citeseer", "lastfm"), (64,))
HELD_OUT = cases(("cora", "pubmed", "twitch-es"), (32, 256))


@functools.lru_cache(maxsize=None)
def ranking(case: Case, rates: ComputeRates, network: Network, root):
    graph = datasets.load(case.graph, root=root)
    widths = (input_width(graph), case.hidden(), graph.num_classes)
    return rank_strategies(graph, case.ranks, case.model, widths, rates, network, case.ranks,
                           partitioners=partitioner_names(ranked=True), **case.options())


def flags(case: Case, settings: dict, args) -> list:
    out = ["--dataset", case.graph, "--model", case.model, "--hidden", case.hidden(), "--nproc", case.ranks,
           "--epochs", args.epochs, "--threads", 1, "--strategy", settings["strategy"]]
    for name in ("partitioner", "grid"):
        if settings.get(name):
            out += ["--" + name, settings[name]]
    if case.model == "gat":
        out += ["--heads", HEADS]
    return out


def measure(case: Case, settings: dict, args) -> list:
    """The kept epochs' times of one run, or [] when it failed (the reason printed)."""
    try:
        records = train(flags(case, settings, args), timeout=args.timeout, data_root=args.data_root)
    except TrainFailed as err:
        print(f"    failed: {err}", flush=True)
        return []
    return [r["epoch_time"] for r in epochs(records, first=args.warmup)]


def shared(rates: ComputeRates, ranks: int) -> ComputeRates:
    """``rates`` for ``ranks`` ranks of one thread on this machine's cores, as auto takes them."""
    return machine_rates.sharing_cores(rates, ranks, 1, os.cpu_count() or 1)


def table_of(data: dict) -> tuple:
    """(probed compute rates, {ranks: network}) of a collected run."""
    return ComputeRates(**data["rates"]), {int(p): Network(**n) for p, n in data["networks"].items()}


def machine(args, worlds) -> tuple:
    from gnnmesh.planner.probe import probe_compute, probe_network
    print("probing compute rates (1 thread) and gloo links ...", flush=True)
    return probe_compute("cpu", 1), {p: probe_network(p) for p in worlds}


def collect(args) -> dict:
    worlds = sorted({c.ranks for c in CALIBRATION + HELD_OUT})
    rates, networks = machine(args, worlds)
    runs = []
    for group, chosen in (("calibration", CALIBRATION), ("held-out", HELD_OUT)):
        for case in chosen:
            ranked = ranking(case, shared(rates, case.ranks), networks[case.ranks], args.data_root)
            print(f"{group} {case}: {len(ranked.ranked)} candidates", flush=True)
            for estimate in ranked.ranked:
                start = time.perf_counter()
                times = measure(case, estimate.settings, args)
                print(f"    {estimate.strategy:<14} {statistics.median(times) * 1e3 if times else float('nan'):9.2f} ms"
                      f"  ({time.perf_counter() - start:.0f} s)", flush=True)
                runs.append({"group": group, "case": asdict(case), "candidate": estimate.strategy,
                             "settings": estimate.settings, "epoch_times": times})
    return {"rates": asdict(rates), "networks": {str(p): asdict(n) for p, n in networks.items()},
            "epochs": args.epochs, "warmup": args.warmup, "runs": runs}


def predictions(data: dict, rates: ComputeRates, networks: dict, root, group: str) -> dict:
    """{(case, candidate): Estimate} of every measured run of ``group`` under ``rates``."""
    out = {}
    for case in {Case(**r["case"]) for r in data["runs"] if r["group"] == group}:
        for estimate in ranking(case, shared(rates, case.ranks), networks[case.ranks], root).ranked:
            out[case, estimate.strategy] = estimate
    return out


def measured(data: dict, group: str, pick=statistics.median) -> dict:
    """{(case, candidate): ``pick`` of the run's kept epoch times} of ``group``."""
    return {(Case(**r["case"]), r["candidate"]): pick(r["epoch_times"])
            for r in data["runs"] if r["group"] == group and r["epoch_times"]}


def calibrated(data: dict, root) -> tuple:
    """(frozen rates, networks, factors) fitted on the calibration runs."""
    rates, networks = table_of(data)
    samples = []
    for (case, name), seconds in measured(data, "calibration").items():
        def predict(r, n, case=case, name=name):
            return next(e for e in ranking(case, shared(r, case.ranks), n, root).ranked if e.strategy == name).epoch_s
        samples.append(calibrate.Sample(calibrate.parts(predict, rates, networks[case.ranks],
                                                        shared(rates, case.ranks).crowding), seconds))
    factors = calibrate.fit(samples)
    frozen = {p: calibrate.scaled(rates, n, factors) for p, n in networks.items()}
    return frozen[min(frozen)][0], {p: net for p, (_, net) in frozen.items()}, factors


def evaluate(data: dict, rates: ComputeRates, networks: dict, root) -> list:
    """One row per held-out case: (case, candidates, chosen, best, regret, spearman, median
    error, whether the chosen run's fastest epoch beat the best run's slowest: within noise)."""
    predicted = predictions(data, rates, networks, root, "held-out")
    times, fastest, slowest = (measured(data, "held-out", pick) for pick in (statistics.median, min, max))
    rows = []
    for case in sorted({c for c, _ in times}, key=lambda c: (c.graph, c.model, c.width, c.ranks)):
        names = [n for c, n in times if c == case and (c, n) in predicted]
        pred = [predicted[case, n].epoch_s for n in names]
        meas = [times[case, n] for n in names]
        chosen = names[pred.index(min(pred))]
        best = names[meas.index(min(meas))]
        rho = spearmanr(pred, meas).statistic if len(names) > 2 else float("nan")
        error = statistics.median(abs(p - m) / m for p, m in zip(pred, meas))
        rows.append((case, len(names), chosen, best, times[case, chosen] / times[case, best], rho, error,
                     fastest[case, chosen] <= slowest[case, best]))
    return rows


def report(rows: list, title: str) -> None:
    print(f"\n{title}")
    print(f"{'configuration':<30} {'cands':>5}  {'chosen':<14} {'best':<14} {'regret':>6} {'spearman':>8} "
          f"{'|error|':>7}  epochs overlap")
    for case, count, chosen, best, regret, rho, error, overlap in rows:
        print(f"{str(case):<30} {count:>5}  {chosen:<14} {best:<14} {regret:>6.2f} {rho:>8.2f} {100 * error:>6.0f}%  "
              f"{'yes' if overlap else 'no'}")
    within = sum(r[4] <= GOAL for r in rows)
    rhos = [r[5] for r in rows if r[5] == r[5]]
    apart = [r for r in rows if r[4] > GOAL and not r[7]]
    print(f"regret <= {GOAL:.2f} in {within} of {len(rows)} configurations ({100 * within / len(rows):.0f}%); "
          f"regret median {statistics.median(r[4] for r in rows):.2f}, worst {max(r[4] for r in rows):.2f}; "
          f"Spearman median {statistics.median(rhos):.2f}; "
          f"|error| median {100 * statistics.median(r[6] for r in rows):.0f}%; "
          f"misses whose epochs do not overlap the best's: {len(apart)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", dest="data_root")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2, help="epochs left out at the start")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", type=Path, help="write the runs and probed rates here (JSON)")
    ap.add_argument("--replay", type=Path, help="analyse an --out file again instead of training")
    ap.add_argument("--save-rates", dest="save_rates", type=Path, help="write the calibrated rates here")
    args = ap.parse_args()
    data = json.loads(args.replay.read_text()) if args.replay else collect(args)
    if args.out and not args.replay:
        args.out.write_text(json.dumps(data, indent=1))
    probed, networks = table_of(data)
    report(evaluate(data, probed, networks, args.data_root), "held-out, probed rates as they are:")
    rates, frozen, factors = calibrated(data, args.data_root)
    print(f"\ncalibrated on {len(measured(data, 'calibration'))} calibration runs: sparse x{factors.sparse:.2f}, "
          f"dense x{factors.dense:.2f}, links x{factors.links:.2f}, {1e3 * factors.overhead_s:.1f} ms per epoch")
    report(evaluate(data, rates, frozen, args.data_root), "held-out, calibrated rates (frozen before these runs):")
    if args.save_rates:
        machine_rates.write(args.save_rates, rates, frozen[max(frozen)])
        print(f"calibrated rates written to {args.save_rates}")


if __name__ == "__main__":
    main()
