"""lp (distributed label propagation, gnnmesh.partition.propagate) against METIS (gp) and
mt-KaHyPar (hp): communication volume, both balances, time and peak memory, side by side.

    python benchmarks/lp_partition.py [--data-root DIR] [--graphs NAME ... | all]
        [--parts 4,16,64] [--repeats 1] [--methods gp,hp,lp] [--epsilon 0.01] [--output FILE]
    python benchmarks/lp_partition.py --candidates [--graphs ...] [--parts 16]

``--candidates`` compares, on one process, the label propagation variants that were the
candidates for ``lp`` (volume / gp's, both imbalances): single-level size-constrained label
propagation from a balanced dealt start (as XtraPuLP and Spinner do), the same from a
Fennel streaming start, and the multilevel scheme ``lp`` uses. The single-level ones use
``lp``'s own balancing and refinement steps at the input level, 30 rounds.

``all`` is every real graph present under the data root plus R-MAT 100k/1M. Repeat r uses
seed r for every method; each cell is the median over the repeats, with the spread
(min-max) when there are several. Ratios (hp/gp, lp/gp) are taken per repeat, then their
median.

- **lp** runs as P ranks partitioning into P parts, each holding its block of rows (the
  vertex ids split into P equal ranges). The ranks are simulated in this process
  (``gnnmesh.partition.simulate``: threads taking turns, the same code; tests show their
  labels equal those of gloo ranks). Its time is the simulation's estimate for P ranks on P
  cores with free communication (per stretch between collectives, the slowest rank), and
  its memory is the largest rank's peak: the numpy and Python allocations tracemalloc
  counted while that rank ran, plus its input rows (indptr and indices, int64), from a
  second, traced run of the first repeat (which must give the same labels).
- **gp** and **hp** run in a fresh child process each; time is the partitioning call and
  memory the child's peak resident size above its size once the graph is loaded (VmHWM,
  reset then), or, for hp, mt-KaHyPar's worker process's whole peak if larger (it holds
  the hypergraph, and its interpreter and libraries: about 280 MiB on the smallest graphs).

Imbalance is max / average - 1 of vertices and of nonzeros + 1 per part (both must stay
within epsilon for gp and lp; hp balances the second only). A run is "beyond epsilon" when
a part holds more of either than the integer bound max(floor((1 + eps) x average),
ceil(average)): whole vertices cannot meet (1 + eps) x average when a part's share is a
few tens of vertices.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from partition_quality import load_graph, real_graphs  # noqa: E402

from gnnmesh.partition import partition, quality  # noqa: E402
from gnnmesh.partition.base import csr_arrays  # noqa: E402
from gnnmesh.partition.propagate import propagate  # noqa: E402
from gnnmesh.partition.simulate import simulate  # noqa: E402

RMAT = "rmat:nodes=100000,edges=1000000,features=0"
DEFAULT_GRAPHS = ["cora", "facebook", "luxembourg-osm", "slashdot", RMAT]
MIB = 1 << 20


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_since_reset() -> int:
    """This process's peak resident bytes since ``_reset_peak`` (VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> None:
    """Start VmHWM afresh at the current size (Linux: 5 > /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def child(method: str, name: str, root: str, parts: int, epsilon: float, seed: int, out: str) -> None:
    """Run in a fresh process: partition ``name`` with ``method`` and write the labels and
    figures next to ``out``."""
    graph = load_graph(name, root)
    _reset_peak()
    base = _rss_bytes()
    start = time.perf_counter()
    part = partition(graph, parts, method, epsilon=epsilon, seed=seed, cache=False)
    seconds = time.perf_counter() - start
    own = _peak_since_reset() - base
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    np.save(out, part.assignment)
    Path(out + ".json").write_text(json.dumps({"seconds": seconds, "peak": max(own, worker)}))


def run_child(method, name, args, parts, seed) -> tuple:
    with tempfile.TemporaryDirectory(prefix="lp-bench-") as folder:
        out = str(Path(folder) / "labels.npy")
        subprocess.run([sys.executable, __file__, "--child", method, name, args.data_root, str(parts),
                        str(args.epsilon), str(seed), out], check=True)
        info = json.loads(Path(out + ".json").read_text())
        return np.load(out), info["seconds"], info["peak"]


def on_rank(comm, indptr, indices, parts, epsilon, seed):
    n = indptr.shape[0] - 1
    lo, hi = n * comm.rank // comm.world_size, n * (comm.rank + 1) // comm.world_size
    rows = indptr[lo:hi + 1]
    block_bytes = (rows.shape[0] + int(rows[-1] - rows[0])) * 8
    labels = propagate(comm, lo, hi, rows - rows[0], indices[rows[0]:rows[-1]], n, parts, epsilon, seed)
    return labels, block_bytes


def run_lp(graph, parts, epsilon, seed, trace: bool = True) -> tuple:
    """(labels, seconds on P cores, largest rank's peak bytes or None, CPU seconds of all
    ranks): timed without tracing (tracemalloc slows numpy several-fold), then, with
    ``trace``, run again traced."""
    indptr, indices = csr_arrays(graph.adj)
    timing = {}
    results, _ = simulate(on_rank, parts, indptr, indices, parts, epsilon, seed, timing=timing)
    labels = np.concatenate([r[0] for r in results])
    peak = None
    if trace:
        traced, peaks = simulate(on_rank, parts, indptr, indices, parts, epsilon, seed, trace_memory=True)
        assert all(np.array_equal(a[0], b[0]) for a, b in zip(results, traced))
        peak = max(p + r[1] for p, r in zip(peaks, results))
    return labels, timing["parallel"], peak, timing["cpu"]


def fennel(level, parts: int, caps: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Fennel's streaming assignment (gamma 1.5) of a one-rank level's vertices in
    ``order``: each to the part with most neighbours already there less
    alpha * gamma * size^(gamma - 1), among the parts with room for it in both weights
    (else the one with most room)."""
    n, gamma = level.n, 1.5
    alpha = (level.adj.shape[0] / 2) * parts ** (gamma - 1) / n ** gamma
    labels = np.full(n, -1, dtype=np.int64)
    loads = np.zeros((parts, 2))
    indptr = level.indptr.tolist()
    for v in order.tolist():
        near = labels[level.adj[indptr[v]:indptr[v + 1]]]
        score = np.bincount(near[near >= 0], minlength=parts) - alpha * gamma * np.sqrt(loads[:, 0])
        fits = np.all(loads + level.vw[v] <= caps, axis=1)
        p = int(np.argmax(np.where(fits, score, -np.inf))) if fits.any() else \
            int(np.argmin((loads / caps).max(axis=1)))
        labels[v] = p
        loads[p] += level.vw[v]
    return labels


def candidates(args) -> None:
    """Volume against gp and both imbalances of the candidate schemes, one process."""
    from gnnmesh.partition import propagate as pp

    names = real_graphs(args.data_root) + [RMAT] if args.graphs == ["all"] else args.graphs
    parts_list = [int(p) for p in args.parts.split(",")]
    print(f"candidates, one process, epsilon {args.epsilon}, seed 0: volume / gp's "
          f"(vertex, nonzeros+1 imbalance)")
    print("| graph | P | dealt + LP | Fennel + LP | multilevel (lp) |")
    print("|---|---|---|---|---|")
    ratios = {k: [] for k in ("dealt", "fennel", "lp")}
    for name in names:
        graph = load_graph(name, args.data_root)
        indptr, indices = csr_arrays(graph.adj)
        n = graph.num_nodes
        for parts in parts_list:
            gp = quality(graph.adj, run_child("gp", name, args, parts, 0)[0])["volume_total"]
            level = pp._first_level(pp.Solo(), 0, n, indptr, indices, n)
            caps = pp._caps(level.vw.sum(0), parts, args.epsilon)
            cells = []
            for key in ("dealt", "fennel", "lp"):
                if key == "lp":
                    labels = propagate(pp.Solo(), 0, n, indptr, indices, n, parts, args.epsilon, 0)
                else:
                    start = (pp._dealt(level, parts, 0) if key == "dealt"
                             else fennel(level, parts, caps[0], np.arange(n)))
                    labels = pp._balance(level, start, parts, caps, 0, 11)
                    labels = pp._refine(level, labels, parts, caps, 0, 13, rounds=30)
                q = quality(graph.adj, labels)
                ratios[key].append(q["volume_total"] / max(gp, 1))
                cells.append(f"{ratios[key][-1]:.3f} ({q['node_imbalance']:.3f}, {q['compute_imbalance']:.3f})")
            print(f"| {graph.name} | {parts} | " + " | ".join(cells) + " |", flush=True)
    for key, values in ratios.items():
        geo = math.exp(sum(math.log(v) for v in values) / len(values))
        print(f"{key}: geometric mean {geo:.3f}, range {min(values):.3f}-{max(values):.3f}")


def integer_bound(average: float, epsilon: float) -> int:
    """The most a part may hold of a weight whose parts average ``average``: (1 + epsilon)
    times it, rounded down, but at least the average rounded up (15.7 vertices a part at
    64 parts of email-eu-core allow 16, 1.9% above the average)."""
    return max(math.floor((1 + epsilon) * average + 1e-9), math.ceil(average - 1e-9))


def beyond_epsilon(q: dict, parts: int, epsilon: float) -> bool:
    """Whether a part holds more vertices or nonzeros + 1 than ``integer_bound`` allows."""
    vertices = q["nodes_max"] / (1 + q["node_imbalance"])  # the average part
    return (q["nodes_max"] > integer_bound(vertices, epsilon)
            or q["compute_load_max"] > integer_bound(q["compute_load_mean"], epsilon))


def median_spread(values, fmt="{:.3f}") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    text = fmt.format(float(np.median(values)))
    if len(values) > 1 and min(values) != max(values):
        text += f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_root = os.environ.get("GNNMESH_DATA") or str(Path(__file__).resolve().parents[2] / "shared/data")
    parser.add_argument("--data-root", default=default_root)
    parser.add_argument("--graphs", nargs="+", default=DEFAULT_GRAPHS,
                        help="names or generator specs, space-separated; 'all' = every real graph present, "
                             "plus R-MAT 100k/1M")
    parser.add_argument("--parts", default="4,16,64")
    parser.add_argument("--repeats", type=int, default=1, help="runs per case, seeds 0..R-1")
    parser.add_argument("--methods", default="gp,hp,lp")
    parser.add_argument("--epsilon", type=float, default=0.01)
    parser.add_argument("--output", help="also write the table and summary to this file")
    parser.add_argument("--candidates", action="store_true",
                        help="compare the candidate schemes instead (one process, seed 0)")
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.candidates:
        candidates(args)
        return
    if args.child:
        method, name, root, parts, epsilon, seed, out = args.child
        child(method, name, root, int(parts), float(epsilon), int(seed), out)
        return
    methods = args.methods.split(",")
    part_counts = [int(p) for p in args.parts.split(",")]
    names = real_graphs(args.data_root) + [RMAT] if args.graphs == ["all"] else args.graphs
    lines = []

    def emit(line=""):
        print(line, flush=True)
        lines.append(line)

    emit(f"lp against gp and hp, epsilon {args.epsilon}, {args.repeats} run(s) per case (seeds 0..{args.repeats - 1}); "
         f"load average at start {os.getloadavg()[0]:.1f}")
    emit()
    emit("| graph | P | gp volume | hp / gp | lp / gp | vertices: gp / hp / lp | nonzeros+1: gp / hp / lp "
         "| seconds: gp / hp / lp | MiB: gp / hp / lp per rank |")
    emit("|---|---|---|---|---|---|---|---|---|")
    summary = {p: {"lp/gp": [], "hp/gp": []} for p in part_counts}
    peaks = {}  # graph -> P -> lp per-rank MiB
    over = []
    start_all = time.perf_counter()
    for name in names:
        graph = load_graph(name, args.data_root)
        for parts in part_counts:
            if parts > graph.num_nodes:
                continue
            got = {m: [] for m in methods}  # method -> [(volume, node imb, load imb, s, peak)]
            for seed in range(args.repeats):
                for method in methods:
                    if method == "lp":  # memory from the first run only (tracing is slow)
                        labels, seconds, peak, _ = run_lp(graph, parts, args.epsilon, seed, trace=seed == 0)
                    else:
                        labels, seconds, peak = run_child(method, name, args, parts, seed)
                    q = quality(graph.adj, labels)
                    got[method].append((q["volume_total"], q["node_imbalance"], q["compute_imbalance"],
                                        seconds, None if peak is None else peak / MIB))
                    if method == "lp" and beyond_epsilon(q, parts, args.epsilon):
                        over.append(f"{graph.name} P={parts} seed {seed}: vertices {q['node_imbalance']:.4f}, "
                                    f"nonzeros+1 {q['compute_imbalance']:.4f}")

            def col(method, i, fmt="{:.3f}"):
                return median_spread([r[i] for r in got.get(method, [])], fmt)

            def ratio(method):
                if method not in got or "gp" not in got:
                    return "-", []
                values = [a[0] / b[0] if b[0] else 1.0 for a, b in zip(got[method], got["gp"])]
                return median_spread(values), values
            hp_text, hp_values = ratio("hp")
            lp_text, lp_values = ratio("lp")
            if lp_values:
                summary[parts]["lp/gp"].append(float(np.median(lp_values)))
            if hp_values:
                summary[parts]["hp/gp"].append(float(np.median(hp_values)))
            if "lp" in got:
                peaks.setdefault(graph.name, {})[parts] = got["lp"][0][4]
            triple = lambda i, fmt: " / ".join(col(m, i, fmt) for m in ("gp", "hp", "lp"))  # noqa: E731
            emit(f"| {graph.name} | {parts} | {col('gp', 0, '{:,.0f}')} | {hp_text} | {lp_text} | "
                 f"{triple(1, '{:.3f}')} | {triple(2, '{:.3f}')} | {triple(3, '{:.2f}')} | {triple(4, '{:.1f}')} |")
    emit()
    for parts in part_counts:
        for key in ("lp/gp", "hp/gp"):
            values = summary[parts][key]
            if values:
                geo = math.exp(sum(math.log(v) for v in values) / len(values))
                within = sum(v <= 1.3 for v in values)
                emit(f"P={parts}: {key} volume over {len(values)} graphs: geometric mean {geo:.3f}, "
                     f"median {np.median(values):.3f}, range {min(values):.3f}-{max(values):.3f}"
                     + (f"; within 1.3x on {within}" if key == "lp/gp" else ""))
    if len(part_counts) > 1:
        first, last = part_counts[0], part_counts[-1]
        falls = [(g, p[first] / p[last]) for g, p in peaks.items() if first in p and last in p]
        if falls:
            emit(f"lp per-rank peak, P={first} over P={last} (ideal {last / first:.0f}): "
                 + ", ".join(f"{g} {r:.1f}" for g, r in falls))
    emit(f"lp balance beyond epsilon (a part above max(floor((1 + eps) x average), ceil(average))): "
         f"{len(over)} run(s)" + ("".join(f"\n  {line}" for line in over)))
    emit(f"total {time.perf_counter() - start_all:.0f} s; load average at end {os.getloadavg()[0]:.1f}")
    if args.output:
        Path(args.output).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
