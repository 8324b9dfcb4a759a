"""What the ranks of a parts directory must agree on, checked when the parts are opened.

Each rank checks its own folder (checksums, ranges, lengths), but a folder can be sound
alone and contradict a peer's: two ranks owning one node, a send list in another order than
its receiver's halo, two ranks' grids under different node orders, two copies of a topology
that differ. A few collectives compare what the ranks read; each check runs under
``comm.agreed``, so every rank reaches the same verdict and a disagreement stops all of them
with one GraphError naming a rank, its file and what disagrees.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from ..comm import agreed, setup_comm
from ..errors import GraphError
from .store import MANIFEST, rank_folder


def _file(part, rank: int, name: str) -> str:
    return str(part.parts.directory / rank_folder(rank) / f"{name}.npy")


def _digest(*arrays: np.ndarray) -> str:
    """A digest of the values (ids compared as int64, whatever width a file stores them in)."""
    h = hashlib.blake2b(digest_size=16)
    for array in arrays:
        array = np.asarray(array)
        h.update(np.ascontiguousarray(array, dtype=np.int64 if array.dtype.kind in "biu" else array.dtype).tobytes())
    return h.hexdigest()


def check_owned(part, owned: np.ndarray) -> None:
    """Every node owned by exactly one rank. Ids travel to the rank whose equal slice of
    ``0..N-1`` holds them (one all-to-all, no rank holding every id); each rank then finds a
    node claimed twice, or none, in its slice."""
    claims = _owned_slice(owned, part.parts.num_nodes)
    agreed(lambda: _owned_slice_error(part, *claims))


def _owned_slice(owned: np.ndarray, num_nodes: int) -> tuple:
    """(the ids of this rank's slice of the nodes, the rank owning each, the slice's bounds)."""
    comm = setup_comm()
    world = comm.world_size
    width = -(-num_nodes // world)
    counts = np.bincount(owned // width, minlength=world).astype(np.int64)  # owned is ascending: grouped
    arriving = comm.all_to_all(torch.from_numpy(counts), [1] * world, [1] * world).numpy()
    ids = comm.all_to_all(torch.from_numpy(np.ascontiguousarray(owned, dtype=np.int64)), counts.tolist(),
                          arriving.tolist()).numpy()
    owners = np.repeat(np.arange(world), arriving)
    start = comm.rank * width
    return ids, owners, (start, min(num_nodes, start + width))


def _owned_slice_error(part, ids: np.ndarray, owners: np.ndarray, bounds: tuple) -> None:
    order = np.argsort(ids, kind="stable")
    ids, owners = ids[order], owners[order]
    twice = np.flatnonzero(ids[1:] == ids[:-1])
    if len(twice):
        i = int(twice[0])
        raise GraphError(f"rank {owners[i + 1]}: {_file(part, owners[i + 1], 'owned')}: node {ids[i]} is "
                         f"owned by rank {owners[i]} too; ranks must own disjoint nodes")
    missing = np.setdiff1d(np.arange(*bounds), ids)
    if len(missing):
        raise GraphError(f"{part.parts.directory / MANIFEST}: node {missing[0]} is owned by no rank; "
                         "the ranks' owned.npy must cover every node")


def check_halos(part, owned: np.ndarray) -> None:
    """For every structure of partition parts: the rows each sender sends a receiver
    (``owned[send]``, in order) are the receiver's halo from it, id for id. The halo is what
    the receiver's block columns mean; a send list reversed or repeating a row would
    otherwise put other nodes' rows there unseen."""
    comm = setup_comm()
    for structure, info in part.parts.manifest["structures"].items():
        counts = np.asarray(info["send_counts"], dtype=np.int64)
        send, halo = agreed(lambda: (part.ids(f"{structure}.send", len(owned)),
                                     part.ids(f"{structure}.halo", part.parts.num_nodes)))
        sent = [_digest(ids) for ids in np.split(owned[send], np.cumsum(counts[comm.rank])[:-1])]
        by_sender = comm.all_gather_object(sent)  # [sender][receiver]: what each rank sends each other
        agreed(lambda: _halo_error(part, structure, halo, counts, by_sender))


def _halo_error(part, structure: str, halo: np.ndarray, counts: np.ndarray, by_sender: list) -> None:
    me = part.rank
    for sender, ids in enumerate(np.split(halo, np.cumsum(counts[:, me])[:-1])):
        if _digest(ids) != by_sender[sender][me]:
            raise GraphError(f"rank {me}: {_file(part, me, structure + '.halo')}: its {len(ids)} halo ids from "
                             f"rank {sender} are not the rows rank {sender} sends it (owned[send] of "
                             f"{_file(part, sender, structure + '.send')})")


def check_same(part, name: str, arrays: tuple, what: str) -> None:
    """``arrays`` (read from this rank's file ``name``) identical on every rank."""
    digests = setup_comm().all_gather_object(_digest(*arrays))

    def compare():
        if digests[part.rank] != digests[0]:
            raise GraphError(f"rank {part.rank}: {_file(part, part.rank, name)}: {what} differ from rank 0's "
                             f"({_file(part, 0, name)}); every rank must hold the same")
    agreed(compare)
