"""1D partition parallelism (Demirci, Haldar, Ferhatosmanoglu, PVLDB 2022, §4.1–4.2).

A vertex partition assigns rows of A and of every vertex-data matrix (features, hidden
states, gradients) to ranks; weights are replicated and their gradients all-reduced. The
graph primitives exchange exactly the boundary rows each neighbour needs (``halo.py``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ... import memory, ops
from ...comm import agreed
from ...errors import GraphError
from ...layout import ParallelLayout
from ...partition.registry import DEFAULT as DEFAULT_PARTITIONER
from ...parts import features as mapped
from ...parts.agreement import check_manifest, check_halos, check_held_once
from ...view import GraphView
from ..agreed_partition import agreed_partition, check_ranks
from ..distributed import DistributedStrategy
from ..input_rows import LeafRows
from ..row_sums import SumOverRanks
from ..strategy import RankData
from .halo import HaloGather, HaloSpMM, build_local_operator, halo_product_by_peer, local_operator


class PartitionView(GraphView):
    """The rows one rank owns; primitives fetch the halo rows they reference. Its blocks of
    the graph operators are cut from the whole graph (``adj`` and ``assignment``) or read
    from this rank's folder of a parts directory (``part``)."""

    operators_on_device = False

    def __init__(self, adj, owned: torch.Tensor, comm, seed: int, device, assignment=None, part=None):
        super().__init__(adj, seed=seed, device=device)
        self.owned, self.comm = owned, comm
        self.assignment, self.part = assignment, part
        self._local: dict = {}

    @property
    def num_nodes(self) -> int:
        return int(self.owned.numel())

    def local(self, name: str):
        if name not in self._local:
            if self.part is not None:
                # every rank checks its own files; all stop alike when one is bad
                block, send, recv, entries = agreed(lambda: read_operator(self.part, name, self.comm))
                self._local[name] = local_operator(block, entries, send, recv, self.comm, self.device)
            else:
                op = self.operator(name)
                self._local[name] = build_local_operator(op, self.assignment, self.comm, self.device)
        return self._local[name]

    # -- primitives ------------------------------------------------------------------------
    def spmm(self, x, op="gcn", values=None):
        if not torch.is_grad_enabled():  # inference: the halo one peer at a time, nothing kept for a backward
            return halo_product_by_peer(x, values, self.local(op))
        return HaloSpMM.apply(x, values, self.local(op))  # values None: the operator's own

    def sddmm(self, dst, src, op="loop", kind="add"):
        local = self.local(op)
        src_all = torch.cat([src, HaloGather.apply(src, local.exchange)])
        return ops.sddmm(local.block, dst, src_all, kind)

    def edge_softmax(self, scores, op="loop"):
        return ops.edge_softmax(self.local(op).block, scores)  # in-edges of my rows are all mine

    def edge_block(self, op):
        return self.local(op).block

    def rows(self):
        return self.owned

    def entries(self, op):
        return self.local(op).edge_ids

    def row_sum(self, sums):
        return SumOverRanks.apply(sums, self.comm)  # the ranks' rows are disjoint and cover the graph


class PartitionParallel(DistributedStrategy):
    name = "partition"
    reported_phases = ("halo",)

    def __init__(self, layout: ParallelLayout, device, method: str = DEFAULT_PARTITIONER, epsilon: float = 0.01,
                 seed: int = 0, partition_file: Optional[str] = None, assignment=None):
        super().__init__(layout, device, "rows")
        self.method, self.epsilon, self.seed, self.partition_file = method, epsilon, seed, partition_file
        self.partition = None
        self.fixed_assignment = assignment  # an explicit vertex -> rank array, mostly for tests
        self.features = None  # from parts: this rank's features, mapped from its folder

    def describe(self) -> str:
        method = self.partition.method if self.partition is not None else self.method  # a stored one's
        return f"partition ({method}, {self.world_size} ranks)"

    def rank_data(self, graph, x, seed, device):
        assignment = self._assignment(graph)
        owned = torch.nonzero(assignment == self.rank).flatten()
        view = PartitionView(graph.adj, owned, self.comm, seed, device, assignment=assignment)
        pick = (lambda t: t[owned].to(device))
        self.comm.take()  # setup traffic (partition broadcast) is not part of any epoch
        return RankData(view, pick(x), pick(graph.y), pick(graph.train_mask), pick(graph.val_mask),
                     pick(graph.test_mask))

    def input_rows(self, data):
        return LeafRows(data, data.row_ids().numpy())  # the owned rows, whose gradient the halos bring home

    def rank_data_from_parts(self, parts, seed, device):
        # a freed temporary's pages go back at once (the checks', the operators' splitting,
        # the halo buffers of every layer): a rank's resident memory follows what it holds
        memory.map_large_blocks()
        check_manifest(parts, self.rank)
        part, owned, (features, *data) = agreed(lambda: _read_rank(parts, self.rank))
        check_held_once(part, owned.numpy())  # what one folder cannot tell: the ranks agree
        check_halos(part, owned.numpy())
        self.method = parts.manifest["method"]
        view = PartitionView(None, owned, self.comm, seed, device, part=part)
        x = features.tensor.to(device)
        self.features = features if x is features.tensor else None  # on another device: a copy
        memory.release_freed()  # the checks' temporaries, kept by the allocator otherwise
        return RankData(view, x, *(t.to(device) for t in data))

    def forward(self, model, view, x):
        """The model's output, its input read a block of rows at a time where the model allows
        it (``LayerStack.reads_input_by_rows``): the features mapped from the parts, each
        block's pages given back once multiplied, so that a rank never holds its whole
        feature table; and in training any input without a gradient of its own, so that
        the first layer keeps neither the input nor its dropped copy for the backward pass
        (its weights' gradient is summed a block at a time, the blocks read and dropped
        again). Both sources take the same path: training from parts and from the dataset
        give the same numbers, bit for bit."""
        if not getattr(model, "reads_input_by_rows", lambda: False)():
            return model(view, x)
        if torch.is_grad_enabled() and torch.is_autocast_enabled(x.device.type):
            return model(view, x)  # the blocks' gradient sums float32 rows, not autocast's
        features = self.features
        if features is not None and x is features.tensor:
            return model.forward_by_blocks(view, features.blocks, len(features))
        if model.training and torch.is_grad_enabled() and not x.requires_grad:
            return model.forward_by_blocks(view, lambda: ((at, x[at]) for at in mapped.row_ranges(x.shape[0])),
                                           x.shape[0])
        return model(view, x)

    def _assignment(self, graph) -> torch.Tensor:
        if self.fixed_assignment is not None:
            check_ranks(self.world_size, graph.num_nodes)
            return torch.as_tensor(np.asarray(self.fixed_assignment), dtype=torch.int64)
        self.partition, assignment = agreed_partition(graph, self.world_size, self.rank, self.method,
                                                      self.epsilon, self.seed, self.partition_file)
        return assignment


def _read_rank(parts, rank: int) -> tuple:
    """(this rank's folder, its owned ids, its vertex data), every array checked."""
    part = parts.rank(rank)
    rows = int(part.info["owned"])
    owned = part.ids("owned", parts.num_nodes)
    if len(owned) != rows:
        raise GraphError(part.where("owned") + f"{len(owned)} ids, the manifest says rank {rank} owns {rows}")
    return part, torch.from_numpy(owned), part.vertex_data(rows, parts.num_features, mapped=True)


def read_operator(part, name: str, comm) -> tuple:
    """(block, send ids per peer, rows received per peer, a function reading its entry ids) of
    operator ``name`` as written in this rank's folder of a parts directory
    (``gnnmesh.parallel.partition.parts``), every array checked."""
    manifest = part.parts.manifest
    info = manifest["operators"].get(name)
    if info is None:
        raise GraphError(f"{part.parts.directory}: the parts hold no operator {name!r}")
    structure = info["structure"]
    counts = np.asarray(manifest["structures"][structure]["send_counts"], dtype=np.int64)
    owned = int(part.info["owned"])
    sent = part.ids(f"{structure}.send", owned)  # rows of this rank's own block
    if counts.shape != (comm.world_size, comm.world_size) or len(sent) != int(counts[comm.rank].sum()):
        raise GraphError(part.where(f"{structure}.send") + f"{len(sent)} ids, the manifest's send counts "
                         f"say {int(counts[comm.rank].sum()) if counts.ndim == 2 else 'otherwise'}")
    send = np.split(sent, np.cumsum(counts[comm.rank])[:-1])
    recv = counts[:, comm.rank]
    block = part.adjacency(structure, (owned, owned + int(recv.sum())), f"{name}.values" if info["values"] else None)
    entries = manifest["structures"][structure]["nnz"]  # each rank's share of the operator's entries
    return block, send, recv, lambda: part.ids(f"{structure}.entries", int(sum(entries)))
