"""``gnnmesh partition``: partition a dataset (stored for reuse) and report its quality."""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from .. import strategies
from ..partition import registry as partitioners
from .flags import add_config_flags

NODE_IMBALANCE_HINT = 0.25  # above this, the report says which methods balance vertex counts
SAMPLING_FLAGS = ("--fanouts", "--batch-size", "--theta", "--delta")
# Choices --partitioner once offered that are not partitioners: what replaced each.
RETIRED = {"tensor": "the tensor strategies' parts: --strategy tensor --nparts P --write-parts DIR",
           "permute2": "the grid3d strategy's blocks: --strategy grid3d --grid R,C (the block balance report; "
                       "--write-shards DIR) or --grid X,Y,Z --write-parts DIR"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("partition", help="partition a graph's vertices for row-parallel "
                                "training, store the result and report its quality")
    add_config_flags(cmd, only=("dataset", "data_root"))
    cmd.add_argument("--input", metavar="DIR",
                     help="instead of --dataset: a sharded input directory ('gnnmesh datasets --shard'), "
                          "partitioned and written by --nproc ranks, none of which holds the whole graph; "
                          f"needs --write-parts, takes --partitioner {', '.join(partitioners.names(distributed=True))} "
                          f"(default {partitioners.DEFAULT_ON_BLOCKS})")
    add_config_flags(cmd, only=("nproc",),
                     helps={"nproc": "with --input: ranks to start, one per part (under torchrun or Slurm "
                                     "leave it out)"})
    add_config_flags(cmd, only=("max_restarts",),
                     helps={"max_restarts": "with --input and --nproc: after a rank fails, start the ranks again "
                                            "up to R times, as many as before; they resume after the last phase "
                                            "every rank finished (kept in DIR.partial beside --write-parts)"})
    cmd.add_argument("--nparts", "--parts", dest="parts", type=int, metavar="N",
                     help="number of parts (ranks); required except with --strategy grid3d (--parts N "
                          "still works; in 'gnnmesh train', --parts DIR names a parts directory)")
    cmd.add_argument("--strategy", choices=partitioned_for(), metavar="STRATEGY",
                     help="the strategy to partition for (default: a vertex partition, the parts of "
                          + ", ".join(s.name for s in strategies.REGISTRY.values() if s.parts and not s.partition_view)
                          + "); " + "; ".join(f"{name}: {strategies.spec(name).partition_view_summary}"
                                             for name in partitioned_for() if strategies.spec(name).partition_view))
    cmd.add_argument("--partitioner", "--method", dest="method", metavar="NAME",
                     help="the vertex partitioner: " + "; ".join(f"{s.name}: {s.summary}" for s in
                                                                  partitioners.REGISTRY.values())
                          + f" (default {partitioners.DEFAULT}). lp also runs on --nproc ranks each holding its "
                          "block (--input); shp takes --fanouts and --batch-size; "
                          + ", ".join(s.name for s in partitioners.REGISTRY.values() if s.extra)
                          + f" need {partitioners.EXTRA_HINT}")
    cmd.add_argument("--grid", help="--strategy grid3d: row and column block counts R,C (e.g. 8,8); with "
                     "--write-parts, the grid3d process grid X,Y,Z")
    cmd.add_argument("--layers", type=int, default=2,
                     help="--strategy grid3d with --write-parts: write the adjacency blocks of models up to "
                          "this deep (default 2; 6 or more covers every depth)")
    cmd.add_argument("--self-loops", dest="self_loops", action="store_true",
                     help="--strategy grid3d: count A + I, the pattern GCN multiplies with")
    cmd.add_argument("--write-shards", dest="write_shards", metavar="DIR",
                     help="--strategy grid3d: also write the double-permuted adjacency and vertex data "
                          "as R x C block files into DIR, for parallel loading")
    cmd.add_argument("--write-parts", dest="write_parts", metavar="DIR",
                     help="also write the partitioned dataset into DIR, one folder per rank "
                          "with everything that rank trains on, for 'gnnmesh train --parts DIR'")
    add_config_flags(cmd, only=("fanouts", "batch_size"),
                     helps={"fanouts": "shp: in-edges sampled per node at each hop, one per layer, -1 for all "
                                       "(e.g. 10,5), as mini-batch training samples them",
                            "batch_size": "shp: seed nodes per batch (default 1024, or the training set if "
                                          "smaller)"})
    cmd.add_argument("--theta", type=float, help="shp: error allowed in the sampled nets' mean "
                     "connectivity (default 0.1)")
    cmd.add_argument("--delta", type=float, help="shp: probability that the error exceeds "
                     "--theta (default 0.5); with --theta, sets the fewest nets to sample")
    add_config_flags(cmd, only=("epsilon", "seed"), defaults=True,
                     helps={"seed": "partitioner seed (default 0); shp also draws its batches with it, as "
                                    "training with that --seed does"})
    cmd.add_argument("--feature-bytes", "--features-bytes", dest="feature_bytes", type=int,
                     help="bytes per vertex row (e.g. 4 x hidden width) to report volume in bytes")
    cmd.add_argument("--cache-dir", dest="cache_dir", help="cache root (default: $GNNMESH_CACHE, "
                     "else ~/.cache/gnnmesh); partitions go to its partitions/ folder")
    return cmd


def run(args, argv=None) -> int:
    from .. import locks
    from ..atomic import check_replaceable
    from ..errors import ConfigError

    check_partitioner(args)
    if args.input is not None:
        return run_input(args, argv)
    if args.dataset is None:
        raise ConfigError("--dataset is required (or --input DIR, a sharded input)")
    if args.nproc not in (None, 1):
        raise ConfigError("--nproc applies with --input only: partitioning a --dataset runs in one process")
    if args.max_restarts is not None:
        raise ConfigError("--max-restarts applies with --input only: partitioning a --dataset runs in one process")
    args.method = args.method or partitioners.DEFAULT
    with contextlib.ExitStack() as held:
        for path, kind in _outputs(args):  # refused before any work: another run's, or not ours to replace
            check_replaceable(path, kind)
            held.enter_context(locks.hold(path, kind.what))
        return _run(args)


def _outputs(args) -> list:
    """(directory, its kind) of every directory this command is asked to write."""
    from ..parallel.grid3d.block_files import OUTPUT as BLOCK_FILES
    from ..parts.store import OUTPUT as PARTS
    return [(path, kind) for path, kind in ((args.write_parts, PARTS), (args.write_shards, BLOCK_FILES)) if path]


def _run(args) -> int:
    from .. import datasets
    from ..errors import ConfigError
    from ..partition import partition, quality
    from ..validate import check_seed

    check_seed(args.seed, "--seed")
    sampled = partitioners.spec(args.method).sampled
    if not sampled or args.strategy:
        for flag in SAMPLING_FLAGS:
            if getattr(args, flag.lstrip("-").replace("-", "_")) is not None:
                raise ConfigError(f"{flag} applies only to --partitioner "
                                  f"{' or '.join(partitioners.names(sampled=True))}")
    view = strategies.spec(args.strategy).partition_view if args.strategy else None
    if view:
        return strategies.load(view)(args)
    for flag, value in (("--grid", args.grid), ("--write-shards", args.write_shards),
                        ("--self-loops", args.self_loops or None)):
        if value is not None:
            raise ConfigError(f"{flag} applies only to --strategy grid3d")
    if args.parts is None:
        raise ConfigError(f"--nparts is required for --partitioner {args.method}")
    if args.feature_bytes is not None and args.feature_bytes < 1:
        raise ConfigError(f"--feature-bytes must be positive, got {args.feature_bytes}")
    graph = datasets.load(args.dataset, root=args.data_root)
    if sampled:
        part, extra = stochastic(graph, args)
    else:
        part, extra = partition(graph, args.parts, args.method, epsilon=args.epsilon, seed=args.seed,
                                cache_dir=args.cache_dir), []
    q = quality(graph.adj, part, feature_bytes=args.feature_bytes)
    for line in report_lines(graph, part, q) + extra:
        print(line)
    if args.write_parts:
        start = time.perf_counter()
        path = parts_writer("partition")(graph, part, args.write_parts, args.dataset)
        print(written_line(path, time.perf_counter() - start))
    return 0


def run_input(args, argv) -> int:
    """``--input DIR``: the parts of a sharded input, written by ``--nproc`` ranks."""
    import torch

    from .. import comm
    from ..atomic import check_replaceable
    from ..datasets.sharded import open_shards
    from ..errors import ConfigError
    from ..launch import world_from_env
    from ..memory import peak_rss_mib
    from ..parallel.partition.parts_from_shards import write_parts_from_shards
    from ..parts.store import OUTPUT as PARTS
    from ..validate import check_seed
    from .flags import start_ranks

    if args.dataset is not None:
        raise ConfigError("give --dataset or --input, not both")
    if not args.write_parts:
        raise ConfigError("--input needs --write-parts DIR: the ranks write the parts there")
    on_blocks = partitioners.names(distributed=True)
    args.method = args.method or partitioners.DEFAULT_ON_BLOCKS
    if args.strategy and strategies.spec(args.strategy).partition_view:
        raise ConfigError(f"--strategy {args.strategy}: from --input only vertex partition parts are written (for "
                          f"the partition, offload and minibatch strategies); {args.strategy}'s parts need the "
                          f"whole graph in one process (--dataset)")
    if args.method not in on_blocks:
        raise ConfigError(f"--partitioner {args.method} needs the whole graph in one process; with --input "
                          f"use one of {', '.join(on_blocks)}")
    for flag, value in (("--grid", args.grid), ("--write-shards", args.write_shards),
                        ("--self-loops", args.self_loops or None), ("--feature-bytes", args.feature_bytes),
                        *((f, getattr(args, f.lstrip("-").replace("-", "_"))) for f in SAMPLING_FLAGS)):
        if value is not None:
            raise ConfigError(f"{flag} does not apply with --input")
    check_seed(args.seed, "--seed")
    check_replaceable(args.write_parts, PARTS)  # before the ranks start; each rank locks it
    check_restarts(args)
    # a restart starts as many ranks as before: the parts' count is the rank count
    launched = start_ranks(args.nproc or 1, argv, args.max_restarts or 0, args.nproc)
    if launched is not None:
        return launched
    world = world_from_env()
    ranks = world[1] if world else 1
    if args.parts is not None and args.parts != ranks:
        raise ConfigError(f"--nparts {args.parts} but {ranks} ranks write the parts, one each (leave --nparts out)")
    if world is not None:
        comm.init(torch.device("cpu"))
    clean = False
    try:
        start = time.perf_counter()
        shards = comm.agreed(lambda: open_shards(args.input))
        path = write_parts_from_shards(shards, args.write_parts, method=args.method, epsilon=args.epsilon,
                                       seed=args.seed, dataset=str(args.input), log=print)
        peaks = comm.setup_comm().all_gather_object(peak_rss_mib())
        if world is None or world[0] == 0:
            print(f"parts:         {path}, written by {ranks} rank{'s' if ranks > 1 else ''} in "
                  f"{time.perf_counter() - start:.1f} s; peak memory per rank "
                  + ", ".join(_size(int(p * 2**20)) for p in peaks))
        clean = True
    finally:
        comm.shutdown(clean=clean)
    return 0


def check_restarts(args) -> None:
    """``--max-restarts`` restarts the ranks ``--nproc`` starts; torchrun restarts its own."""
    from ..errors import ConfigError
    from ..launch import launched_rank, world_from_env

    if args.max_restarts is None or args.max_restarts == 0:
        return
    if args.max_restarts < 0:
        raise ConfigError(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    if world_from_env() is not None and not launched_rank():
        raise ConfigError("--max-restarts restarts the ranks gnnmesh starts (--nproc); under torchrun, give "
                          "--max-restarts to torchrun: its restarts resume alike")
    if (args.nproc or 1) < 2:
        raise ConfigError("--max-restarts needs --nproc 2 or more: one process is rerun by hand, and resumes alike")


def stochastic(graph, args) -> tuple:
    """``--partitioner shp``: the partition for mini-batches drawn from the training nodes (every
    node when the dataset has no split), and report lines on its sampling and on the
    volume of held-out batches."""
    from ..errors import ConfigError
    from ..partition.stochastic import batch_volumes, stochastic_partition
    from ..sampling import DEFAULT_BATCH

    if args.fanouts is None:
        raise ConfigError("--partitioner shp needs --fanouts F1,F2,... (in-edges sampled per hop, as in training)")
    pool = graph.train_mask if graph.train_mask is not None and bool(graph.train_mask.any()) else None
    pool_size = graph.num_nodes if pool is None else int(pool.sum())
    batch_size = min(DEFAULT_BATCH, pool_size) if args.batch_size is None else args.batch_size
    options = {name: getattr(args, name) for name in ("theta", "delta") if getattr(args, name) is not None}
    part = stochastic_partition(graph, args.parts, args.fanouts, batch_size, seeds_pool=pool,
                                epsilon=args.epsilon, seed=args.seed, cache_dir=args.cache_dir, **options)
    held_out = batch_volumes(graph, [part], args.fanouts, batch_size, seeds_pool=pool, seed=args.seed)[0]
    return part, sampling_lines(part.sampling, "training" if pool is not None else "all", held_out)


def sampling_lines(sampling: dict, pool: str, held_out) -> list:
    """What ``shp`` sampled and merged, and the mean volume of a held-out batch."""
    s = sampling
    fanouts = ",".join(str(f) for f in s["fanouts"])
    stops = {"hoeffding": "the Hoeffding count", "epoch": "one epoch", "min batches": "the minimum batches",
             "max batches": "the most batches", "one part": "one part: nothing to sample"}
    return [
        f"sampling:      fanouts {fanouts}, {s['batch_size']:,} seeds per batch from {s['seeds']:,} "
        f"{pool} nodes ({s['operator']} operator)",
        f"batches:       {s['batches']:,} sampled ({s['epochs']} epoch{'s' * (s['epochs'] != 1)}); "
        f"stopped at {stops.get(s['stop'], s['stop'])}",
        f"nets:          {s['sampled_nets']:,} sampled, {s['nets']:,} after merging identical ones "
        f"(Hoeffding: {s['needed_nets']:,} for theta {s['theta']:g}, delta {s['delta']:g})",
        f"batch volume:  {held_out.mean():,.1f} rows per batch, all layers, one direction "
        f"(mean of {held_out.shape[0]} held-out batches)",
    ]


def written_line(path, seconds: float) -> str:
    """What a --write-parts run wrote, how long it took and this process's peak memory."""
    from ..memory import peak_rss_mib
    files = {(s.st_dev, s.st_ino): s.st_size for s in (f.stat() for f in Path(path).rglob("*") if f.is_file())}
    return (f"parts:         {path} ({len(files)} files, {_size(sum(files.values()))}) "
            f"written in {seconds:.1f} s; peak memory of this command {_size(int(peak_rss_mib() * 2**20))}")


def parse_block_grid(text) -> tuple:
    """``"R,C"`` as two positive ints; anything else is a ConfigError naming --grid."""
    from ..errors import ConfigError

    if text is None:
        raise ConfigError("--strategy grid3d needs --grid R,C (row and column block counts)")
    pieces = str(text).replace(" ", "").split(",")
    if len(pieces) != 2 or not all(p.isdigit() and int(p) > 0 for p in pieces):
        raise ConfigError(f"--grid expects two positive integers R,C (e.g. 8,8), got {text!r}")
    return int(pieces[0]), int(pieces[1])


def run_grid(args) -> int:
    """``--strategy grid3d``: block balance report, and the block files if asked."""
    from .. import datasets
    from ..errors import ConfigError
    from ..parallel.grid3d.permutation import balance, check_grid, max_over_mean, peak_bound
    from ..transforms import add_self_loops

    if args.parts is not None:
        raise ConfigError("--nparts does not apply to --strategy grid3d; give --grid R,C")
    if args.write_parts:
        return write_grid(args)
    grid = parse_block_grid(args.grid)
    graph = datasets.load(args.dataset, root=args.data_root)
    grid = check_grid(grid, graph.adj.shape, what="--grid")
    counts = balance(graph.adj, grid, seed=args.seed, self_loops=args.self_loops, balanced=True)
    total = int(counts["original"].sum())
    print(f"graph:         {graph.name}, {graph.num_nodes:,} nodes, {graph.num_edges:,} entries")
    print(f"blocks:        {grid[0]} x {grid[1]} of {'A + I' if args.self_loops else 'A'}, "
          f"{total / (grid[0] * grid[1]):,.1f} nonzeros each on average; permutation seed {args.seed}")
    print("max/mean nonzeros per block:")
    for key, label in (("original", "original"), ("one", "one permutation"),
                       ("two", "two permutations"), ("balanced", "balanced pair")):
        print(f"  {label + ':':<19}{max_over_mean(counts[key]):.3f} "
              f"(max {int(counts[key].max()):,})")
    least = peak_bound(add_self_loops(graph.adj) if args.self_loops else graph.adj, grid)
    print(f"  {'no pair below:':<19}{least / (total / (grid[0] * grid[1])):.3f} (max {least:,})")
    if args.write_shards:
        from ..parallel.grid3d.block_files import write_block_files
        path = write_block_files(graph, args.write_shards, grid, seed=args.seed)
        files = [f for f in path.iterdir() if f.is_file()]
        print(f"shards:        {grid[0]} x {grid[1]} blocks of P_r A P_c^T written to {path} "
              f"({len(files)} files, {_size(sum(f.stat().st_size for f in files))})")
    return 0


def write_tensor(args) -> int:
    """``--strategy tensor --nparts P --write-parts DIR``: parts for the tensor strategies."""
    from .. import datasets
    from ..errors import ConfigError
    from ..partition.base import check_parts

    if not args.write_parts or args.parts is None:
        raise ConfigError("--strategy tensor writes parts for the tensor strategies: give --nparts P "
                          "and --write-parts DIR")
    graph = datasets.load(args.dataset, root=args.data_root)
    parts = check_parts(args.parts, graph.num_nodes)
    print(f"graph:         {graph.name}, {graph.num_nodes:,} nodes, {graph.num_edges:,} entries")
    start = time.perf_counter()
    path = parts_writer("tensor")(graph, parts, args.write_parts, args.dataset)
    print(written_line(path, time.perf_counter() - start))
    return 0


def write_grid(args) -> int:
    """``--strategy grid3d --grid X,Y,Z --write-parts DIR``: grid3d parts."""
    from .. import datasets
    from ..errors import ConfigError
    from ..layout.grid import parse_grid

    if args.write_shards:
        raise ConfigError("--write-parts and --write-shards write different things; give one")
    if args.layers < 1:
        raise ConfigError(f"--layers must be at least 1, got {args.layers}")
    pieces = str(args.grid or "").split(",")
    if len(pieces) != 3:
        raise ConfigError(f"--write-parts with --strategy grid3d needs the process grid as --grid X,Y,Z, "
                          f"got {args.grid!r}")
    grid = parse_grid(args.grid, "--grid")
    dims, total = grid.dims(), grid.size
    graph = datasets.load(args.dataset, root=args.data_root)
    if total > graph.num_nodes:
        raise ConfigError(f"--grid {args.grid}: {total} ranks for a graph of {graph.num_nodes} nodes")
    print(f"graph:         {graph.name}, {graph.num_nodes:,} nodes, {graph.num_edges:,} entries")
    start = time.perf_counter()
    path = parts_writer("grid3d")(graph, dims, args.write_parts, args.dataset, layers=args.layers, seed=args.seed)
    print(written_line(path, time.perf_counter() - start))
    return 0


def report_lines(graph, part, q: dict) -> list:
    """A readable report: one line per metric."""
    where = part.path or "not stored (cache unwritable)"
    how = "reused" if part.from_cache else "computed"
    preset = f" (mt-KaHyPar, {part.preset} preset)" if part.preset else ""
    lines = [
        f"graph:         {graph.name}, {graph.num_nodes:,} nodes, {graph.num_edges:,} entries",
        f"partition:     {part.method}{preset}, {part.parts} parts, epsilon {part.epsilon:g}, "
        f"seed {part.seed}",
        f"stored at:     {where}",
        f"time:          {part.seconds:.2f} s ({how})",
        f"volume:        {q['volume_total']:,} rows per layer and direction "
        f"({q['volume_avg']:,.1f} per rank on average)",
        f"max send:      {q['send_volume_max']:,} rows (one rank, per layer)",
        f"max receive:   {q['recv_volume_max']:,} rows (one rank, per layer)",
        f"messages:      {q['messages_total']:,} per layer and direction "
        f"({q['messages_avg']:.1f} per rank on average, at most {q['messages_max']} sent by one)",
        f"compute load:  max {q['compute_load_max']:,} / mean {q['compute_load_mean']:,.1f} "
        f"nonzeros+rows (imbalance {100 * q['compute_imbalance']:.1f}%)",
        f"part sizes:    {q['nodes_min']:,} to {q['nodes_max']:,} nodes "
        f"(imbalance {100 * q['node_imbalance']:.1f}%: vertex data, and so memory, per rank)",
    ]
    if partitioners.spec(part.method).balances == "nonzeros" and q["node_imbalance"] > NODE_IMBALANCE_HINT:
        lines.append(f"note:          {part.method} balances nonzeros only; the largest part holds "
                     f"{1 + q['node_imbalance']:.1f}x the average vertex data. gp balances vertex "
                     "counts and nonzeros together; rp balances vertex counts")
    if "bytes_per_layer" in q:
        lines.append(f"bytes:         {_size(q['bytes_per_layer'])} per layer and direction, "
                     f"at most {_size(q['send_bytes_max'])} sent by one rank")
    return lines


def partitioned_for() -> tuple:
    """The strategies ``--strategy`` offers: those with a parts writer."""
    return tuple(name for name in strategies.names() if strategies.spec(name).parts)


def check_partitioner(args) -> None:
    """A ConfigError unless ``--partitioner`` names a registered partitioner, and applies: a
    retired choice names what replaced it, a strategy with a view of its own takes none."""
    from ..errors import ConfigError
    if args.method in RETIRED:
        raise ConfigError(f"--partitioner {args.method}: not a partitioner; {RETIRED[args.method]}")
    if args.method is not None:
        partitioners.spec(args.method, "--partitioner")
        if args.strategy and strategies.spec(args.strategy).partition_view:
            raise ConfigError(f"--partitioner applies to vertex partitions; --strategy {args.strategy} partitions "
                              "its own way")


def parts_writer(strategy: str):
    """The writer of ``strategy``'s parts, as the registry names it."""
    return strategies.load(strategies.spec(strategy).parts)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    return f"{n} B"
