"""Partition parts written by P ranks from a sharded input, so that no process ever holds the
whole graph (``gnnmesh partition --nproc P --input DIR --write-parts OUT``).

Rank r of P:

1. reads its 1/P of the edges of the shard set (``gnnmesh.datasets.sharded``) and of its
   node rows (the id range ``[r n / P, (r + 1) n / P)``, its *block*);
2. sends every edge to the rank whose block holds the edge's row, in all-to-all rounds of
   at most ``ROUND_ITEMS`` edges a rank; there duplicates collapse and the input's edge
   rules (symmetrise, drop self-loops) apply, so each rank holds its block's rows of A
   exactly as the one-process loader builds them;
3. partitions: ``rp`` and ``contiguous`` from vectors over all nodes that every rank
   computes alike, ``lp`` (``partition.propagate``) from the blocks themselves;
4. sends each row of A and each node's data to the rank of its part;
5. builds the rows of every operator, its halo and its send lists from its own rows
   (``partition.halo.local_halo``), and writes its folder.

The folders are those ``write_partition_parts`` writes from the whole graph, bit for bit,
for the same graph and partition (``tests/parallel/partition/test_parts_from_shards.py``). Besides its share
of the graph a rank holds a few vectors over all nodes: the part, the row counts and the
degree of every node, a few tens of bytes a node.

The ranks write into one staged directory (on a file system they share) that rank 0 moves
into place once every rank has written its folder: an error on any rank, or a rank killed,
leaves the output as it was. The results of steps 2 to 4 (``PHASES``) are kept beside the
output until it is written (``phases``), so that a run stopped on the way resumes after the
last phase every rank finished, and writes the same parts.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ... import comm as comms
from ... import locks
from ...atomic import check_replaceable, staged_directory
from ...datasets import sorted_unique
from ...errors import ConfigError, GraphError
from ...partition import registry as partitioners
from ...partition.base import add_sums, entry_sums, structure_key
from ...partition.halo import local_halo
from ...partition.methods import contiguous_parts, random_parts
from ...parts.store import FORMAT_VERSION, OUTPUT, rank_folder, save_array, write_manifest
from ...view import OPERATORS
from .phases import Phases

ROUND_ITEMS = 1 << 21  # items (edges, rows) one rank sends in one all-to-all round
BUILT_IN = ("gcn", "mean", "sum", "loop")  # the operators built here from rows alone
NODE_DATA = ("x", "y", "train_mask", "val_mask", "test_mask")
# The phases kept for a resume (``phases``), the long steps of a run: the rows routed
# to their blocks, the assignment, the rows and the node data moved to their parts' ranks.
PHASES = ("rows", "assignment", "part-rows", "part-nodes")


def write_parts_from_shards(shards, directory, *, method: str, epsilon: float, seed: int,
                            dataset: str, comm=None, log=None) -> Path:
    """Write the partition parts of the shard set ``shards`` (a ``ShardSet``) into
    ``directory``, one part per rank of ``comm`` (default: the world's setup communicator),
    every rank calling this with the same arguments. The phases before the writing are kept
    beside ``directory`` until it is written (``phases``): a run that stopped resumes after
    the last phase every rank finished, saying so through ``log`` (rank 0)."""
    comm = comm or comms.setup_comm()
    on_blocks = partitioners.names(distributed=True)
    if method not in on_blocks:
        raise ConfigError(f"--partitioner {method} needs the whole graph in one process; from "
                          f"--input use one of {', '.join(on_blocks)}")
    extra = sorted(set(OPERATORS) - set(BUILT_IN))
    if extra:
        raise ConfigError(f"graph operator {extra[0]!r} is registered: parts from --input hold the "
                          f"built-in operators ({', '.join(BUILT_IN)}) only")
    if shards.task is None:
        raise GraphError(f"{shards.directory}: the shard set has no labels (y and the split masks), which "
                         f"parts hold for training; write it from a labelled source")
    parts, n = comm.world_size, shards.num_nodes
    if n < parts:
        raise GraphError(f"{shards.directory}: {n} nodes cannot be split among {parts} ranks")
    comms.agreed(lambda: _same_input(comm, shards))
    with locks.hold(directory, "parts directory", peers=True):
        # refused now, not after the phases (the staging checks again before it replaces)
        comms.agreed(lambda: check_replaceable(directory, OUTPUT) if comm.rank == 0 else None)
        start = time.perf_counter()
        key = {"input": _input_digest(shards), "method": method, "epsilon": epsilon, "seed": seed,
               "parts_format": FORMAT_VERSION}
        phases = Phases(comm, directory, key, PHASES, log)
        rows = None if phases.done("part-rows") else phases.run(
            "rows", lambda: _read_rows(comm, shards), decode=lambda saved: _Rows(**saved))
        block = slice(*_share(n, parts, comm.rank))  # a rank keeps its block of the labels
        assignment, seconds = phases.run(
            "assignment", lambda: (_assign(comm, rows, method, parts, epsilon, seed), time.perf_counter() - start),
            encode=lambda done: {"labels": done[0][block], "seconds": np.float64(done[1])},
            decode=lambda saved: (_gather(comm, saved["labels"]), float(saved["seconds"])))
        mine = phases.run("part-rows", lambda: _my_rows(comm, rows, assignment), decode=lambda saved: _Rows(**saved))
        rows = None  # freed here (not del: the phases' lambdas above name it)
        nodes = phases.run("part-nodes", lambda: _my_nodes(comm, shards, assignment, mine.owned))
        path = _write(comm, shards, directory, mine, nodes, assignment, dataset,
                      {"method": method, "epsilon": epsilon, "seed": seed, "seconds": seconds})
        phases.finish()
        return path


# -- the input ---------------------------------------------------------------------------------

def _input_digest(shards) -> str:
    """What names the shard set's content: its meta.json lists every file's checksum."""
    return hashlib.blake2b((Path(shards.directory) / "meta.json").read_bytes(), digest_size=16).hexdigest()


def _same_input(comm, shards) -> None:
    """Every rank reads the same shard set (a host's copy may differ, or be another set)."""
    digests = comm.all_gather_object(_input_digest(shards))
    for rank, other in enumerate(digests):
        if other != digests[0]:
            raise GraphError(f"{shards.directory}/meta.json: rank {rank} read another shard set than "
                             f"rank 0 (the ranks must see the same input)")


def _share(total: int, parts: int, rank: int) -> tuple[int, int]:
    return total * rank // parts, total * (rank + 1) // parts


class _Rows:
    """Rows of A held by this rank, in CSR order: ``owned`` ascending global ids, ``counts``
    entries per row, ``cols`` global column ids (ascending within a row), ``values`` float32
    or None when unweighted."""

    def __init__(self, owned, counts, cols, values):
        self.owned, self.counts, self.cols, self.values = owned, counts, cols, values

    @property
    def row_ids(self) -> np.ndarray:
        return np.repeat(self.owned, self.counts)


def _read_rows(comm, shards) -> _Rows:
    """This rank's block of rows of A, from its share of the edge listing."""
    lo, hi = _share(shards.num_edges, comm.world_size, comm.rank)
    edges = comms.agreed(lambda: shards.read_edges(lo, hi))
    return _block_rows(comm, shards, lo, *edges)


def _block_rows(comm, shards, first: int, src, dst, weight) -> _Rows:
    """This rank's block of rows of A, built from the edges every rank read (this one's
    start at ``first`` in the listing)."""
    n, parts = shards.num_nodes, comm.world_size
    position = np.arange(first, first + len(src), dtype=np.int64)  # listing order: weighted duplicates sum in it
    if shards.drop_self_loops:
        keep = src != dst
        src, dst, position = src[keep], dst[keep], position[keep]
        weight = None if weight is None else weight[keep]
    mirrored = np.zeros(len(src), dtype=np.uint8)
    if shards.symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        mirrored = np.concatenate([mirrored, np.ones_like(mirrored)])
        position = np.concatenate([position, position])
        weight = None if weight is None else np.concatenate([weight, weight])
    block_starts = np.array([_share(n, parts, r)[0] for r in range(parts)], dtype=np.int64)
    dest = np.searchsorted(block_starts, dst, side="right") - 1
    keys = dst * n + src
    del src, dst
    if weight is None:
        (keys,) = _exchange(comm, dest, [keys])
        keys = sorted_unique(keys)
        values = None
    else:
        keys, values = _weighted_entries(*_exchange(comm, dest, [keys, weight.astype(np.float64),
                                                                    mirrored, position]),
                                         shards.symmetrize)
    lo, hi = _share(n, parts, comm.rank)
    rows = keys // n
    counts = np.bincount(rows - lo, minlength=hi - lo)
    return _Rows(np.arange(lo, hi, dtype=np.int64), counts, keys - rows * n, values)


def _weighted_entries(keys, weight, mirrored, position, symmetrize: bool):
    """Sorted unique keys and their float32 values, as ``adjacency_from_edges`` makes them:
    duplicates summed in listing order (in float64); symmetrised, the larger of the two
    directions' sums, an entry whose value is then 0 dropped."""
    order = np.lexsort((position, mirrored, keys))
    keys, weight, mirrored = keys[order], weight[order], mirrored[order]
    first = np.flatnonzero(np.concatenate([[True], (keys[1:] != keys[:-1]) | (mirrored[1:] != mirrored[:-1])]))
    sums = np.add.reduceat(weight, first) if len(first) else weight[:0]
    keys, mirrored = keys[first], mirrored[first]
    if not symmetrize:
        return keys, sums.astype(np.float32)
    head = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) else first[:0]
    best = np.maximum.reduceat(np.maximum(sums, 0.0), head) if len(head) else sums
    keep = best != 0
    return keys[head][keep], best[keep].astype(np.float32)


# -- the partition -----------------------------------------------------------------------------

def _assign(comm, rows: _Rows, method: str, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """The part of every node (int64 [n]), the same on every rank: the partitioner's form that
    runs on blocks (``PartitionerSpec.distributed``)."""
    return partitioners.load(partitioners.spec(method).distributed)(comm, rows, parts, epsilon, seed)


def random_assignment(comm, rows: _Rows, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """``rp`` on the ranks' blocks: the random parts of every node."""
    return random_parts(_node_count(comm, rows), parts, seed)


def contiguous_assignment(comm, rows: _Rows, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """``contiguous`` on the ranks' blocks: id ranges of equal nonzeros + 1."""
    return contiguous_parts(_gather(comm, rows.counts + 1), parts)


def _node_count(comm, rows: _Rows) -> int:
    return int(comm.all_reduce(torch.tensor([len(rows.owned)], dtype=torch.int64)).item())


def propagated_assignment(comm, rows: _Rows, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """``lp`` on the ranks' blocks: multilevel label propagation across the ranks."""
    n = _node_count(comm, rows)
    from ...partition.propagate import propagate
    indptr = np.concatenate([[0], np.cumsum(rows.counts)])
    lo = int(rows.owned[0]) if len(rows.owned) else _share(n, parts, comm.rank)[0]
    labels = propagate(comm, lo, lo + len(rows.owned), indptr, rows.cols, n, parts, epsilon, seed)
    return _gather(comm, np.asarray(labels, dtype=np.int64))


def _gather(comm, block: np.ndarray) -> np.ndarray:
    """The blocks of every rank, concatenated (a vector over all nodes)."""
    sizes = [int(s) for s in comm.all_gather_object(len(block))]
    return comm.all_gather(torch.from_numpy(np.ascontiguousarray(block)), sizes).numpy()


def _my_rows(comm, rows: _Rows, assignment: np.ndarray) -> _Rows:
    """The rows of A of this rank's part, sent by the ranks whose blocks held them."""
    owner = assignment[rows.owned]
    ids, counts = _exchange(comm, owner, [rows.owned, rows.counts])
    entry_owner = np.repeat(owner, rows.counts)
    payload = [rows.row_ids, rows.cols] + ([] if rows.values is None else [rows.values])
    got = _exchange(comm, entry_owner, payload)
    order = np.argsort(ids, kind="stable")
    entry_order = np.lexsort((got[1], got[0]))  # by row, then column: CSR order
    values = None if rows.values is None else got[2][entry_order]
    return _Rows(ids[order], counts[order], got[1][entry_order], values)


def _my_nodes(comm, shards, assignment: np.ndarray, owned: np.ndarray) -> dict:
    """The node data (features, labels, split masks) of this rank's part, in ``owned`` order."""
    lo, hi = _share(shards.num_nodes, comm.world_size, comm.rank)
    data = comms.agreed(lambda: shards.read_nodes(lo, hi))
    ids = np.arange(lo, hi, dtype=np.int64)
    got = _exchange(comm, assignment[lo:hi], [ids] + [data[k] for k in NODE_DATA])
    order = np.argsort(got[0], kind="stable")
    return {k: v[order] for k, v in zip(NODE_DATA, got[1:])}


# -- moving items between ranks ----------------------------------------------------------------

def _exchange(comm, dest: np.ndarray, arrays: list) -> list:
    """Send item k of every array in ``arrays`` (rows of equal count; 2-D arrays move whole
    rows) to rank ``dest[k]``; returns what arrived, the items of each round by source
    rank. At most ``ROUND_ITEMS`` items leave a rank per round, so the buffers stay bounded
    however large the graph."""
    rounds = max(int(v) for v in comm.all_gather_object(-(-len(dest) // ROUND_ITEMS)))
    pieces = [[] for _ in arrays]
    for r in range(rounds):
        part = slice(r * ROUND_ITEMS, (r + 1) * ROUND_ITEMS)
        order = np.argsort(dest[part], kind="stable")
        send = np.bincount(dest[part][order], minlength=comm.world_size)
        recv = comm.all_to_all(torch.from_numpy(send), [1] * comm.world_size, [1] * comm.world_size).numpy()
        for out, array in zip(pieces, arrays):
            out.append(_move(comm, np.ascontiguousarray(array[part][order]), send, recv))
    return [np.concatenate(p) if p else np.asarray(a)[:0] for p, a in zip(pieces, arrays)]


def _move(comm, array: np.ndarray, send: np.ndarray, recv: np.ndarray) -> np.ndarray:
    width = int(np.prod(array.shape[1:], dtype=np.int64))
    as_bytes = array.dtype == np.bool_
    flat = torch.from_numpy((array.view(np.uint8) if as_bytes else array).reshape(-1))
    got = comm.all_to_all(flat, (send * width).tolist(), (recv * width).tolist()).numpy()
    got = got.view(np.bool_) if as_bytes else got
    return got.reshape((-1,) + array.shape[1:])


# -- the operators -----------------------------------------------------------------------------

def _with_loops(rows: _Rows):
    """The rows of A + I (a loop of value 1 added to every row without one): counts, cols,
    values (float32, 1 where A is unweighted), and whether a loop was added to each row."""
    row_ids = rows.row_ids
    has_loop = np.zeros(len(rows.owned), dtype=bool)
    at_row = np.repeat(np.arange(len(rows.owned)), rows.counts)
    has_loop[at_row[rows.cols == row_ids]] = True
    missing = ~has_loop
    cols = np.concatenate([rows.cols, rows.owned[missing]])
    row_of = np.concatenate([at_row, np.flatnonzero(missing)])
    values = np.ones(len(rows.cols), np.float32) if rows.values is None else rows.values
    values = np.concatenate([values, np.ones(int(missing.sum()), np.float32)])
    order = np.lexsort((cols, row_of))
    return rows.counts + missing, cols[order], values[order], missing


def _full(comm, n: int, owned: np.ndarray, values: np.ndarray, dtype) -> np.ndarray:
    """A vector over all nodes holding each rank's ``values`` at its ``owned`` ids."""
    full = torch.zeros(n, dtype=dtype)
    full[torch.from_numpy(owned)] = torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
    return comm.all_reduce(full).numpy()


def _row_sums(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Row sums accumulated in float64 and rounded to float32, as ``transforms`` does."""
    at_row = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(at_row, weights=values, minlength=len(counts)).astype(np.float32)


def _operators(comm, rows: _Rows, n: int) -> tuple[dict, dict]:
    """``{name: structure}`` and, per structure, ``(counts, cols, values or None)`` of this
    rank's rows with the global position of each entry; the structures named and shared as
    the one-process writer names and shares them (by operator order)."""
    loop_counts, loop_cols, loop_values, missing = _with_loops(rows)
    no_loop_missing = int(comm.all_reduce(torch.tensor([int(missing.sum())])).item()) == 0
    weights = np.ones(len(rows.cols), np.float32) if rows.values is None else rows.values
    at_row = np.repeat(np.arange(len(rows.owned)), rows.counts)
    at_loop_row = np.repeat(np.arange(len(rows.owned)), loop_counts)

    deg = _full(comm, n, rows.owned, _row_sums(loop_counts, loop_values), torch.float32)
    deg_t = torch.from_numpy(deg)
    inv_sqrt = torch.where(deg_t > 0, deg_t.pow(-0.5), torch.zeros_like(deg_t)).numpy()
    loop_row_ids = rows.owned[at_loop_row]
    gcn = inv_sqrt[loop_row_ids] * loop_values * inv_sqrt[loop_cols]
    mean_deg = torch.from_numpy(_row_sums(rows.counts, weights))
    inv = torch.where(mean_deg > 0, 1.0 / mean_deg, torch.zeros_like(mean_deg)).numpy()
    mean = inv[at_row] * weights

    plain = ("plain", rows.counts, rows.cols)
    looped = plain if no_loop_missing else ("looped", loop_counts, loop_cols)
    ops = {"gcn": (looped, gcn), "mean": (plain, mean), "sum": (plain, rows.values), "loop": (looped, None)}
    structures, named = {}, {}
    for name in OPERATORS:
        (kind, counts, cols), values = ops[name]
        if kind not in structures:
            structures[kind] = {"name": name, "counts": counts, "cols": cols,
                                "entries": _entry_ids(comm, n, rows.owned, counts)}
        named[name] = (structures[kind], values)
    return named, structures


def _entry_ids(comm, n: int, owned: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The position of each of this rank's entries among the whole operator's (CSR order)."""
    full = _full(comm, n, owned, counts, torch.int64)
    starts = np.cumsum(full) - full
    return np.repeat(starts[owned], counts) + (np.arange(int(counts.sum())) -
                                               np.repeat(np.cumsum(counts) - counts, counts))


# -- writing -----------------------------------------------------------------------------------

def _write(comm, shards, directory, mine: _Rows, nodes: dict, assignment: np.ndarray, dataset: str,
           how: dict) -> Path:
    n, parts, rank = shards.num_nodes, comm.world_size, comm.rank
    named, structures = _operators(comm, mine, n)
    fingerprint, num_edges = _fingerprint(comm, mine, n)
    stage = _Stage(comm, directory)
    with stage as tmp:
        halos = {s["name"]: _halo(comm, mine.owned, s, assignment) for s in structures.values()}
        folder = tmp / rank_folder(rank)
        files, summary = comms.agreed(lambda: _written(folder, lambda: _write_folder(folder, mine, nodes, named,
                                                                                         structures, halos)))
        everyone = comm.all_gather_object((len(mine.owned), files, summary))
        if rank == 0:
            manifest = {
                "format": FORMAT_VERSION, "dataset": dataset, "name": shards.name, "fingerprint": fingerprint,
                "num_nodes": n, "num_edges": num_edges, "num_features": shards.num_features,
                "num_classes": shards.num_classes, "task": shards.task, "directed": shards.directed,
                "weighted": shards.weighted, "kind": "partition", "parts": parts,
                "how": f"{how['method']}, epsilon {how['epsilon']:g}, seed {how['seed']}",
                "method": how["method"], "epsilon": how["epsilon"], "seed": how["seed"],
                "partition_seconds": how["seconds"],
                "operators": {name: {"structure": s["name"], "values": v is not None} for name, (s, v) in named.items()},
                "structures": {s["name"]: {"send_counts": [e[2][s["name"]]["send_counts"] for e in everyone],
                                           "nnz": [e[2][s["name"]]["nnz"] for e in everyone]}
                               for s in structures.values()},
                "ranks": [{"owned": int(e[0]), "files": e[1]} for e in everyone],
            }
            write_manifest(tmp, manifest)
    return Path(directory)


def _fingerprint(comm, mine: _Rows, n: int) -> tuple[str, int]:
    """``partition.graph_key`` of A and its entry count, summed over the ranks' rows."""
    sums = entry_sums(mine.row_ids, mine.cols, n)
    total = torch.from_numpy(np.concatenate([sums.view(np.int64), [len(mine.cols)]]))
    total = comm.all_reduce(total).numpy()  # int64 sums wrap as the uint64 lanes do
    return structure_key((n, n), int(total[2]), add_sums(np.zeros(2, np.uint64), total[:2].view(np.uint64))), \
        int(total[2])


def _written(folder: Path, write):
    """``write()``, where a file that cannot be written (a full disk) is bad input naming it."""
    try:
        return write()
    except OSError as err:
        where = err.filename or folder
        raise ConfigError(f"{where}: cannot write the parts ({err.strerror or err})") from None


def _write_folder(folder: Path, mine: _Rows, nodes: dict, named: dict, structures: dict,
                  halos: dict) -> tuple[dict, dict]:
    """This rank's folder, written as ``write_partition_parts`` writes it."""
    files: dict = {}
    folder.mkdir()
    save_array(folder, "owned", mine.owned, files)
    for name in NODE_DATA:
        save_array(folder, name, nodes[name], files)
    summary, blocks = {}, {}
    for s in structures.values():
        name = s["name"]
        halo = halos[name]
        save_array(folder, f"{name}.indptr", halo.block.indptr.numpy(), files)
        save_array(folder, f"{name}.indices", halo.block.indices.numpy(), files)
        save_array(folder, f"{name}.entries", halo.entry_ids, files)
        save_array(folder, f"{name}.halo", halo.halo, files)
        save_array(folder, f"{name}.send", np.concatenate(halo.send_index), files)
        summary[name] = {"send_counts": halo.send_counts.tolist(), "nnz": halo.block.nnz}
        blocks[name] = np.searchsorted(s["entries"], halo.entry_ids)  # block order of my entries
    for op, (s, values) in named.items():
        if values is not None:
            save_array(folder, f"{op}.values", values[blocks[s["name"]]], files)
    return files, summary


def _halo(comm, owned: np.ndarray, structure: dict, assignment: np.ndarray):
    """This rank's halo of a structure; what it sends each peer is the peer's halo slice
    from it, which the peers send over."""
    halo = local_halo(owned, structure["counts"], structure["cols"], structure["entries"], None,
                      assignment, comm.world_size, comm.rank, [])
    counts = _counts_to_me(comm, halo.recv_counts)
    wanted = comm.all_to_all(torch.from_numpy(halo.halo), halo.recv_counts.tolist(), counts).numpy()
    asked = np.split(wanted, np.cumsum(counts)[:-1])
    halo.send_index = [np.searchsorted(owned, ids) for ids in asked]
    return halo


def _counts_to_me(comm, recv_counts: np.ndarray) -> list:
    """How many halo rows each rank needs from this one (its counts, exchanged)."""
    counts = torch.from_numpy(np.ascontiguousarray(recv_counts, dtype=np.int64))
    return comm.all_to_all(counts, [1] * comm.world_size, [1] * comm.world_size).tolist()


class _Stage:
    """The staged output directory: rank 0 makes it and, on leaving without an error on any
    rank, moves it into place; the others write into it (its path sent from rank 0)."""

    def __init__(self, comm, directory):
        self.comm, self.directory = comm, Path(directory)
        self._context = None

    def __enter__(self) -> Path:
        if self.comm.rank == 0:
            self._context = staged_directory(self.directory, OUTPUT)
            path = comms.agreed(lambda: str(self._context.__enter__()))
        else:
            path = comms.agreed(lambda: None)
        return Path(self.comm.broadcast_object(path))

    def __exit__(self, kind, error, trace) -> Optional[bool]:
        if self._context is None:
            return None
        return self._context.__exit__(kind, error, trace)
