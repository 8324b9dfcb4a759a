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
import json

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


def check_manifest(parts, rank: int) -> None:
    """The same manifest on every rank (each host may hold its own copy): the counts the halo
    exchange sizes its messages by and the checksums each rank verifies its folder against
    come from it."""
    text = json.dumps(parts.manifest, sort_keys=True)
    digests = setup_comm().all_gather_object(hashlib.blake2b(text.encode(), digest_size=16).hexdigest())

    def compare():
        if digests[rank] != digests[0]:
            raise GraphError(f"rank {rank}: {parts.directory / MANIFEST}: differs from rank 0's manifest; "
                             "every rank must open a copy of the same parts")
    agreed(compare)


def check_held_once(part, owned: np.ndarray) -> None:
    """Every node owned by exactly one rank, and every entry of each operator structure held
    by one rank (entry ids name edges in dropout masks, as the single process does)."""
    check_split(part, "owned", owned, part.parts.num_nodes, "node")
    for structure, info in part.parts.manifest["structures"].items():
        entries = agreed(lambda: part.ids(f"{structure}.entries", int(sum(info["nnz"]))))
        check_split(part, f"{structure}.entries", entries, int(sum(info["nnz"])), "entry")


def check_split(part, name: str, ids: np.ndarray, total: int, noun: str) -> None:
    """The ids of the ranks' files ``name`` together are ``0..total-1``, each once. Ids travel
    to the rank whose equal slice of ``0..total-1`` holds them (one all-to-all, no rank
    holding every id); each rank then counts the ids of its slice and finds one claimed
    twice, or by none. A rank holds its ids, a sorted copy, the ids it receives and their
    counts: four arrays of its share (entry ids are the setup's largest), no more."""
    claims = _slice(ids, total)
    agreed(lambda: _slice_error(part, name, noun, *claims))


def _slice(ids: np.ndarray, total: int) -> tuple:
    """(the ids of this rank's slice of ``0..total-1``, in the order of the ranks sending
    them, how many each rank sent, the slice's bounds)."""
    comm = setup_comm()
    world = comm.world_size
    width = max(1, -(-total // world))
    ids = np.sort(np.asarray(ids, dtype=np.int64))  # grouped by the slice they go to
    counts = np.bincount(ids // width, minlength=world).astype(np.int64)
    arriving = comm.all_to_all(torch.from_numpy(counts), [1] * world, [1] * world).numpy()
    mine = comm.all_to_all(torch.from_numpy(ids), counts.tolist(), arriving.tolist()).numpy()
    del ids
    start = min(total, comm.rank * width)
    return mine, arriving, (start, min(total, start + width))


def _slice_error(part, name: str, noun: str, ids: np.ndarray, arriving: np.ndarray, bounds: tuple) -> None:
    start, stop = bounds
    ids -= start  # this rank's own buffer; the ids sent here lie in the slice
    claims = np.bincount(ids, minlength=stop - start)
    twice = np.flatnonzero(claims > 1)
    if len(twice):
        dup = int(twice[0])
        first, second = np.searchsorted(np.cumsum(arriving), np.flatnonzero(ids == dup)[:2], side="right").tolist()
        dup += start
        also = "too" if first != second else "twice"
        raise GraphError(f"rank {second}: {_file(part, second, name)}: {noun} {dup} is rank {first}'s {also}; "
                         f"every {noun} belongs to one rank")
    missing = np.flatnonzero(claims == 0)
    if len(missing):
        raise GraphError(f"{part.parts.directory / MANIFEST}: {noun} {int(missing[0]) + start} belongs to no rank; "
                         f"the ranks' {name}.npy together must hold each {noun} once")


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
