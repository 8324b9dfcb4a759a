"""Inference (``gnnmesh predict``) on one process, on 4 ranks from parts and out of core,
against PyG's full-graph inference of the same model.

A 2-layer GCN (hidden 128) is trained for one epoch on an R-MAT graph and checkpointed (the
weights do not change the speed); the graph is partitioned once into 4 parts
(``--partitioner``, default gp: METIS balances vertex counts, and so each rank's memory; hp
balances nonzeros only and can leave one rank most of the rows). Then, each in its own
fresh process so that every peak is its own:

* single: ``gnnmesh predict --dataset G`` on one process;
* partition x4: ``gnnmesh predict --parts DIR`` on 4 ranks (torchrun), each rank's peak;
* offload: ``gnnmesh predict --strategy offload --device-memory B``, B a quarter of the
  single process's peak, measured first in the same run;
* PyG: the same weights in a ``GCNConv`` stack (eval mode, ``torch.no_grad()``), given the
  torch CSR adjacency, one forward pass, each layer normalizing the adjacency as
  ``GCNConv`` does by default. The same process then times the forward again with the
  normalization computed once beforehand (``gcn_norm``, ``normalize=False``), for reference.

The gnnmesh runs are the real command, run in-process by this script's worker, which times
``Trainer.from_checkpoint`` (setup: graph sharding, model, strategy) and ``Trainer.predict``
(the inference pass) by wrapping them, and reads the process's resident high-water mark
(VmHWM) after each phase; a rank of the 4-rank job reports its own. The pass of a job is its
slowest rank's; its CPU time (user + system, all ranks together) is less sensitive than wall
time to other work on the machine. "command" is the whole process's wall time (start-up,
imports, reading the graph or parts, writing the prediction). PyG's process loads the same
cached graph, and its logits are checked against gnnmesh's (first round).

Rounds alternate the runs (single, PyG, partition, offload, single, ...); a figure is the
median over rounds and its range, and a ratio is taken within each round (side by side in
one run) before its median and range.

    python benchmarks/predict.py --repeats 3                       # R-MAT 1M nodes, 10M edges, 128 features
    python benchmarks/predict.py --nodes 100000 --edges 1000000 --repeats 3   # quick look
    python benchmarks/predict.py --runs single,pyg,partition              # without the (slow) offload run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from driver import Spread, TrainFailed, train

RUNS = ("single", "pyg", "partition", "offload")
# goals: (ratio, its limit)
GOALS = {"pass": 0.6, "peak": 1.1, "rank": 0.35}


def hwm_mib() -> float:
    """This process's resident high-water mark (VmHWM), MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status")


def cpu_s() -> float:
    """CPU time (user + system) this process has used: less sensitive than wall time to other
    work on the machine."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


# -- workers: one process (or one rank) each ------------------------------------------------------
def gnnmesh_worker(args, argv: list) -> int:
    """``gnnmesh <argv>`` in this process, its setup and pass timed; writes this rank's record."""
    from gnnmesh import cli, memory
    from gnnmesh.train import Trainer

    rank = int(os.environ.get("RANK", "0"))
    record = {"rank": rank, "start_mib": rss_mib()}
    setup, infer = Trainer.from_checkpoint.__func__, Trainer.predict

    def from_checkpoint(cls, *a, **kw):
        record["loaded_mib"] = memory.peak_rss_mib()  # the graph or this rank's part read
        start = time.perf_counter()
        trainer = setup(cls, *a, **kw)
        record["setup_s"] = time.perf_counter() - start
        record["setup_mib"] = memory.peak_rss_mib()
        return trainer

    def predict(self, *a, **kw):
        start, cpu = time.perf_counter(), cpu_s()
        out = infer(self, *a, **kw)
        record["pass_s"], record["pass_cpu_s"] = time.perf_counter() - start, cpu_s() - cpu
        record["pass_mib"] = memory.peak_rss_mib()
        if self.strategy.holds_memory_budget:  # offload: its fast-tier peak, as its epochs report it
            extra = self.strategy.report(record["pass_s"], memory.rank_peaks(self.device))
            record.update(fast_peak_mib=extra["fast_peak_bytes_max"] / 2**20,
                          budget_mib=extra["budget_bytes"] / 2**20, chunks=extra.get("chunks"),
                          host_tier_mib=extra.get("host_tier_bytes", 0) / 2**20)
        return out

    Trainer.from_checkpoint, Trainer.predict = classmethod(from_checkpoint), predict
    start = time.perf_counter()
    status = cli.main(argv)
    record.update(main_s=time.perf_counter() - start, peak_mib=memory.peak_rss_mib(), status=status)
    Path(args.record, f"rank-{rank}.json").write_text(json.dumps(record))
    return status


def pyg_worker(args) -> int:
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    import gnnmesh
    from gnnmesh import datasets

    torch.set_num_threads(args.threads)
    record = {"rank": 0, "start_mib": rss_mib()}
    start = time.perf_counter()
    graph = datasets.load(args.spec)
    trained, _ = gnnmesh.load(args.checkpoint)
    n = graph.num_nodes
    adj_t = torch.sparse_csr_tensor(graph.adj.indptr, graph.adj.indices, torch.ones(graph.num_edges), size=(n, n))
    x = graph.x.float()
    record["loaded_mib"] = hwm_mib()

    def stack(normalize: bool):
        convs = torch.nn.ModuleList()
        for layer in trained.layers:
            conv = GCNConv(layer.lin.in_features, layer.lin.out_features, normalize=normalize)
            conv.lin.weight.data.copy_(layer.lin.weight.data)
            conv.bias.data.copy_(layer.bias.data)
            convs.append(conv)
        return convs.eval()

    def forward(convs, adj):
        h = x
        for i, conv in enumerate(convs):
            h = conv(F.relu(h) if i else h, adj)
        return h

    with torch.no_grad():
        convs = stack(normalize=True)
        record["setup_s"] = time.perf_counter() - start
        record["setup_mib"] = hwm_mib()
        t0, cpu = time.perf_counter(), cpu_s()
        out = forward(convs, adj_t)
        record["pass_s"], record["pass_cpu_s"] = time.perf_counter() - t0, cpu_s() - cpu
        record["pass_mib"] = record["peak_mib"] = hwm_mib()
        if args.save:
            import numpy as np
            np.save(args.save, out.numpy())
        del out, convs
        # for reference: the normalized adjacency computed once, then a plain forward
        t0 = time.perf_counter()
        normed, _ = gcn_norm(adj_t, None, n, add_self_loops=True)
        record["norm_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        forward(stack(normalize=False), normed)
        record["prenormed_pass_s"] = time.perf_counter() - t0
    record["main_s"] = time.perf_counter() - start
    record["status"] = 0
    Path(args.record, "rank-0.json").write_text(json.dumps(record))
    return 0


# -- the driver -----------------------------------------------------------------------------------
def run_process(cmd: list, env: dict, record: Path, timeout: float) -> dict:
    """Run ``cmd``; ``{"ranks": [each rank's record], "command_s": wall time}`` or ``{"failed": why}``."""
    record.mkdir(parents=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"over {timeout:g} s"}
    wall = time.perf_counter() - start
    if done.returncode:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {"failed": lines[-1] if lines else f"exit status {done.returncode}"}
    ranks = sorted((json.loads(p.read_text()) for p in record.glob("rank-*.json")), key=lambda r: r["rank"])
    return {"ranks": ranks, "command_s": wall}


def spawn(name: str, args, tmp: Path, round_: int, budget_mib: float = 0.0) -> dict:
    here = str(Path(__file__).resolve())
    record = tmp / f"record-{name}-{round_}"
    out = tmp / f"out-{name}-{round_}"
    env = dict(os.environ)
    worker = [here, "--worker", "gnnmesh", "--record", str(record), "--"]
    predict = ["predict", "--checkpoint", str(tmp / "model.pt"), "--out", str(out), "--quiet"]
    if name == "pyg":
        cmd = [sys.executable, here, "--worker", "pyg", "--record", str(record), "--spec", args.spec,
               "--checkpoint", str(tmp / "model.pt"), "--threads", str(args.threads)]
        if round_ == 0:
            cmd += ["--save", str(tmp / "pyg-logits.npy")]
    elif name == "partition":
        env["OMP_NUM_THREADS"] = str(max(1, args.threads // args.ranks))  # as 'gnnmesh --nproc' shares cores
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks),
               *worker, *predict, "--parts", str(tmp / "parts"), "--strategy", "partition"]
    else:
        cmd = [sys.executable, *worker, *predict, "--dataset", args.spec, "--threads", str(args.threads)]
        if name == "offload":
            cmd += ["--strategy", "offload", "--device-memory", f"{int(budget_mib)}MiB"]
    result = run_process(cmd, env, record, args.timeout)
    if not (name == "single" and round_ == 0):
        shutil.rmtree(out, ignore_errors=True)
    return result


def figures(result: dict) -> dict:
    """One run's figures: the slowest rank's times, the largest rank's peaks, every rank's peak."""
    ranks = result["ranks"]
    out = {"command_s": result["command_s"], "rank_peaks": [r["peak_mib"] for r in ranks],
           "pass_cpu_s": sum(r["pass_cpu_s"] for r in ranks)}
    for key in ("setup_s", "pass_s", "main_s", "norm_s", "prenormed_pass_s", "fast_peak_mib", "budget_mib",
                "host_tier_mib", "chunks"):
        if key in ranks[0]:
            out[key] = max(r[key] for r in ranks)
    for key in ("start_mib", "loaded_mib", "setup_mib", "pass_mib", "peak_mib"):
        out[key] = max(r[key] for r in ranks)
    return out


def agreement(tmp: Path) -> str:
    """Largest difference between gnnmesh's written logits and PyG's (the first round's)."""
    import numpy as np

    from gnnmesh.predict import read
    try:
        mine = read(tmp / "out-single-0")
        theirs = np.load(tmp / "pyg-logits.npy")
    except (OSError, ValueError) as err:
        return f"not compared ({err})"
    diff = float(np.abs(mine.values - theirs[mine.ids]).max())
    scale = float(np.abs(theirs).max())
    return f"max |gnnmesh - PyG| = {diff:.2e} (largest logit {scale:.2e}), over {len(mine.ids):,} nodes"


def cell(values, digits: int = 2) -> str:
    values = [v for v in values if v is not None]
    return Spread.of(values).format(digits) if values else "-"


def verdict(ratio: Spread, limit: float) -> str:
    return f"{'holds' if ratio.median <= limit else 'missed'} (goal <= {limit:g})"


def driver(args) -> None:
    import torch
    print(f"graph: {args.spec}  gcn: {args.layers} layers, hidden {args.hidden}  threads: {args.threads}  "
          f"torch {torch.__version__}  rounds: {args.repeats}  partition: {args.ranks} ranks, {args.partitioner}")
    load = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="gnnmesh-predict-", dir=args.work_dir))
    try:
        start = time.perf_counter()
        try:  # also generates and caches the graph, which every run below then reads
            records = train(["--dataset", args.spec, "--epochs", 1, "--hidden", args.hidden, "--layers", args.layers,
                             "--eval-every", 1, "--checkpoint", tmp / "model.pt"], timeout=args.timeout)
        except TrainFailed as err:
            raise SystemExit(f"training the model failed: {err}")
        print(f"  model: 1 epoch, checkpoint in {time.perf_counter() - start:.1f} s "
              f"(training peak {records[-1].get('peak_rss_mib_max', 0):,.0f} MiB)")
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "gnnmesh", "partition", "--dataset", args.spec, "--nparts",
                               str(args.ranks), "--partitioner", args.partitioner, "--write-parts", str(tmp / "parts")],
                              capture_output=True, text=True, timeout=args.timeout, check=False)
        if done.returncode:
            raise SystemExit(f"partitioning failed: {done.stderr.strip().splitlines()[-1:]}")
        sizes = [line for line in done.stdout.splitlines() if line.startswith("part sizes")]
        print(f"  parts: {args.ranks} ({args.partitioner}) written in {time.perf_counter() - start:.1f} s; "
              f"{sizes[0].split(':', 1)[1].strip() if sizes else ''}", flush=True)

        runs = {name: [] for name in RUNS}
        failed = {}
        budget = None
        for round_ in range(args.repeats):
            for name in args.runs:
                if name == "offload" and budget is None:
                    continue
                result = spawn(name, args, tmp, round_, budget or 0.0)
                if "failed" in result:
                    failed[name] = result["failed"]
                    runs[name].append(None)
                    print(f"  round {round_ + 1}: {name} failed: {result['failed']}", file=sys.stderr, flush=True)
                    continue
                runs[name].append(figures(result))
                if name == "single" and budget is None:
                    budget = runs[name][-1]["peak_mib"] / 4
                print(f"  round {round_ + 1}: {name} done, pass {runs[name][-1]['pass_s']:.2f} s, "
                      f"peak {runs[name][-1]['peak_mib']:,.0f} MiB", file=sys.stderr, flush=True)
        report(args, runs, failed, budget, agreement(tmp))
        print(f"\nload average (1 min) before and after: {load[0]:.2f}, {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} cores (other work on the machine slows every run)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(args, runs: dict, failed: dict, budget, agrees: str) -> None:
    labels = {"single": "gnnmesh single", "pyg": "PyG GCNConv", "partition": f"gnnmesh partition x{args.ranks}",
              "offload": "gnnmesh offload"}
    print(f"\nsame model: {agrees}")
    print(f"offload budget (--device-memory): {budget or 0:,.0f} MiB = the first single run's peak / 4\n")
    print("| run | ranks | pass s | pass CPU s (all ranks) | setup s | command s | peak RSS MiB (largest rank) "
          "| each rank's peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.runs:
        got = [r for r in runs[name] if r]
        if not got:
            print(f"| {labels[name]} | | failed: {failed.get(name, 'not run')} | | | | | |")
            continue
        ranks = len(got[0]["rank_peaks"])
        each = " / ".join(cell([r["rank_peaks"][i] for r in got], 0) for i in range(ranks)) if ranks > 1 else ""
        print(f"| {labels[name]} | {ranks} | {cell(r['pass_s'] for r in got)} | {cell(r['pass_cpu_s'] for r in got)} | "
              f"{cell(r['setup_s'] for r in got)} | "
              f"{cell(r['command_s'] for r in got)} | {cell((r['peak_mib'] for r in got), 0)} | {each} |")
    pyg = [r for r in runs["pyg"] if r]
    if pyg:
        print(f"| PyG, normalization computed once | 1 | {cell(r['prenormed_pass_s'] for r in pyg)} "
              f"(+ gcn_norm {cell(r['norm_s'] for r in pyg)}) | | | | | |")

    print("\nwhere the memory goes (MiB, high-water mark after each phase; medians; a job's largest rank)")
    print("| run | after imports (RSS) | before setup (graph mapped / parts manifest) | setup | pass | end (written) |")
    print("|---|---|---|---|---|---|")
    for name in args.runs:
        got = [r for r in runs[name] if r]
        if got:
            print(f"| {labels[name]} | " + " | ".join(cell((r[k] for r in got), 0) for k in
                                                     ("start_mib", "loaded_mib", "setup_mib", "pass_mib", "peak_mib"))
                  + " |")

    def paired(a: str, b: str, fa, fb):
        values = [fa(x) / fb(y) for x, y in zip(runs[a], runs[b]) if x and y]
        return Spread.of(values) if values else None

    print("\nratios within each round, median (min-max)")
    rows = [
        ("gnnmesh single / PyG: pass time", paired("single", "pyg", lambda r: r["pass_s"], lambda r: r["pass_s"]),
         GOALS["pass"]),
        ("gnnmesh single / PyG: pass CPU time", paired("single", "pyg", lambda r: r["pass_cpu_s"],
                                                       lambda r: r["pass_cpu_s"]), None),
        ("gnnmesh single / PyG: peak RSS", paired("single", "pyg", lambda r: r["peak_mib"], lambda r: r["peak_mib"]),
         GOALS["peak"]),
        ("gnnmesh single / PyG normalizing once: pass time (+ its gcn_norm)",
         paired("single", "pyg", lambda r: r["pass_s"], lambda r: r["prenormed_pass_s"] + r["norm_s"]), None),
        ("gnnmesh single / PyG: setup + pass", paired("single", "pyg", lambda r: r["setup_s"] + r["pass_s"],
                                                      lambda r: r["setup_s"] + r["pass_s"]), None),
        ("gnnmesh single / PyG: whole command", paired("single", "pyg", lambda r: r["command_s"],
                                                       lambda r: r["command_s"]), None),
        (f"largest rank at P={args.ranks} / single: peak RSS",
         paired("partition", "single", lambda r: r["peak_mib"], lambda r: r["peak_mib"]), GOALS["rank"]),
        (f"largest rank at P={args.ranks} / single: peak RSS above the process's start (after imports)",
         paired("partition", "single", lambda r: r["peak_mib"] - r["start_mib"],
                lambda r: r["peak_mib"] - r["start_mib"]), None),
        (f"partition x{args.ranks} / single: pass time",
         paired("partition", "single", lambda r: r["pass_s"], lambda r: r["pass_s"]), None),
        ("offload / single: pass time", paired("offload", "single", lambda r: r["pass_s"], lambda r: r["pass_s"]),
         None),
    ]
    for label, ratio, goal in rows:
        if ratio is None:
            print(f"  {label}: -")
            continue
        print(f"  {label}: {ratio.format(2)}x" + (f"  {verdict(ratio, goal)}" if goal is not None else ""))
    off = [r for r in runs["offload"] if r]
    if off and budget:
        print(f"  offload peak RSS / budget: {cell(r['peak_mib'] / budget for r in off)}x  "
              f"(the whole process: its host tier is RAM too)")
        fast = [r["fast_peak_mib"] / r["budget_mib"] for r in off if r.get("fast_peak_mib") is not None]
        print(f"  offload fast-tier peak / budget: {cell(fast)}x  (resident memory above the setup's, as "
              f"its epochs report it)")
        host = [r["host_tier_mib"] for r in off if r.get("host_tier_mib")]
        if host:
            print(f"  offload host tier: {cell(host, 0)} MiB in {off[0].get('chunks')} chunks")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=4, help="ranks of the partition run (default 4)")
    parser.add_argument("--partitioner", default="gp", help="partitioner of the parts (default gp: balances "
                                                            "vertex counts, so each rank's memory)")
    parser.add_argument("--threads", type=int, default=None, help="compute threads of a single process "
                                                                  "(default: torch's choice); ranks share them")
    parser.add_argument("--repeats", type=int, default=3, help="rounds: processes per run")
    parser.add_argument("--runs", type=lambda text: tuple(text.split(",")), default=RUNS,
                        help=f"which runs, in order (default {','.join(RUNS)}; offload needs single before it)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    parser.add_argument("--work-dir", help="where the checkpoint, parts and predictions go (default: a "
                                           "temporary directory)")
    parser.add_argument("--worker", choices=("gnnmesh", "pyg"), help=argparse.SUPPRESS)
    parser.add_argument("--record", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker == "gnnmesh":
        sys.exit(gnnmesh_worker(args, rest[1:] if rest[:1] == ["--"] else rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    unknown = sorted(set(args.runs) - set(RUNS))
    if unknown:
        parser.error(f"--runs: unknown run {unknown[0]!r}; choose from {', '.join(RUNS)}")
    if args.threads is None:
        import torch
        args.threads = torch.get_num_threads()
    if args.worker == "pyg":
        sys.exit(pyg_worker(args))
    args.spec = args.spec or (f"rmat:nodes={args.nodes},edges={args.edges},features={args.features},"
                              f"classes={args.classes}")
    driver(args)


if __name__ == "__main__":
    main()
