"""1D partition parallelism (Demirci, Haldar, Ferhatosmanoglu, PVLDB 2022, §4.1–4.2).

A vertex partition assigns rows of A and of every vertex-data matrix (features, hidden
states, gradients) to ranks; weights are replicated and their gradients all-reduced. The
graph primitives exchange exactly the boundary rows each neighbour needs (``halo.py``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .. import ops
from ..comm import Mesh, setup_comm
from ..errors import ConfigError
from ..view import GraphView, random_mask
from .base import Shard, Strategy
from .halo import HaloGather, HaloSpMM, build_local_operator


class PartitionView(GraphView):
    """The rows one rank owns; primitives fetch the halo rows they reference."""

    operators_on_device = False

    def __init__(self, adj, assignment: torch.Tensor, comm, seed: int, device):
        super().__init__(adj, seed=seed, device=device)
        self.assignment, self.comm = assignment, comm
        self.owned = torch.nonzero(assignment == comm.rank).flatten()
        self._local: dict = {}

    @property
    def num_nodes(self) -> int:
        return int(self.owned.numel())

    def local(self, name: str):
        if name not in self._local:
            op = self.operator(name)
            self._local[name] = build_local_operator(op, self.assignment, self.comm, self.device)
        return self._local[name]

    # -- primitives ------------------------------------------------------------------------
    def spmm(self, x, op="gcn", values=None):
        local = self.local(op)
        if values is None:
            values = local.block.values if local.block.values is not None else x.new_ones(local.block.nnz)
        return HaloSpMM.apply(x, values, local)

    def sddmm(self, dst, src, op="loop", kind="add"):
        local = self.local(op)
        src_all = torch.cat([src, HaloGather.apply(src, local.exchange)])
        return ops.sddmm(local.block, dst, src_all, kind)

    def edge_softmax(self, scores, op="loop"):
        return ops.edge_softmax(self.local(op).block, scores)  # in-edges of my rows are all mine

    def vertex_mask(self, row_shape, p):
        mask = random_mask((self.adj.shape[0],) + row_shape, p, self._next_seed(), "cpu")
        return mask[self.owned]

    def edge_mask(self, op, edge_shape, p):
        mask = random_mask((self.operator(op).nnz,) + edge_shape, p, self._next_seed(), "cpu")
        return mask[self.local(op).edge_ids]


class PartitionParallel(Strategy):
    name = "partition"

    def __init__(self, device, method: str = "hp", epsilon: float = 0.01, seed: int = 0,
                 partition_file: Optional[str] = None, mesh: Optional[Mesh] = None,
                 assignment=None):
        self.device = torch.device(device)
        self.mesh = mesh or Mesh({"rows": _world_size()}, self.device)
        self.comm = self.mesh.comm("rows")
        self.rank, self.world_size = self.comm.rank, self.comm.world_size
        self.method, self.epsilon, self.seed, self.partition_file = method, epsilon, seed, partition_file
        self.partition = None
        self.fixed_assignment = assignment  # an explicit vertex -> rank array, mostly for tests

    def describe(self) -> str:
        return f"partition ({self.method}, {self.world_size} ranks)"

    def shard(self, graph, x, seed, device):
        assignment = self._assignment(graph)
        view = PartitionView(graph.adj, assignment, self.comm, seed, device)
        rows = view.owned
        pick = (lambda t: t[rows].to(device))
        self.comm.take()  # setup traffic (partition broadcast) is not part of any epoch
        return Shard(view, pick(x), pick(graph.y), pick(graph.train_mask), pick(graph.val_mask),
                     pick(graph.test_mask))

    def _assignment(self, graph) -> torch.Tensor:
        """Rank 0 computes (or loads) the partition; everyone receives the same one."""
        if self.world_size > graph.num_nodes:
            raise ConfigError(f"{self.world_size} ranks for a graph of {graph.num_nodes} nodes: "
                              "every rank needs at least one node")
        if self.fixed_assignment is not None:
            return torch.as_tensor(np.asarray(self.fixed_assignment), dtype=torch.int64)
        result = None
        if self.rank == 0:
            result = self._compute_partition(graph)
        result = setup_comm().broadcast_object(result)  # partitioning may take long
        if isinstance(result, Exception):
            raise result
        self.partition = result
        return torch.from_numpy(np.asarray(result.assignment, dtype=np.int64))

    def _compute_partition(self, graph):
        try:
            from .. import partition as partitioning
            if self.partition_file:
                return partitioning.load_partition(self.partition_file, graph, parts=self.world_size)
            return partitioning.partition(graph, self.world_size, self.method, epsilon=self.epsilon,
                                          seed=self.seed)
        except Exception as err:  # shipped to the other ranks so that all stop with the same error
            return err

    # -- dense parameters and metrics --------------------------------------------------------
    def all_reduce(self, tensor):
        with self.comm.phase("metrics"):
            return self.comm.all_reduce(tensor)

    def sync_gradients(self, model):
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads or self.world_size == 1:
            return
        flat = torch.cat([g.flatten() for g in grads])
        with self.comm.phase("grad"):
            self.comm.all_reduce(flat)
        start = 0
        for g in grads:
            g.copy_(flat[start:start + g.numel()].view_as(g))
            start += g.numel()

    def report(self, epoch_time: float) -> dict:
        stats = self.comm.take()
        phases = stats["phases"]
        mine = {"comm_time": stats["wait_seconds"], "compute_time": epoch_time - stats["wait_seconds"],
                "halo_bytes": phases.get("halo", {}).get("bytes", 0),
                "halo_messages": phases.get("halo", {}).get("messages", 0),
                "bytes": sum(p["bytes"] for p in phases.values())}
        everyone = self.comm.all_gather_object(mine)
        self.comm.take()  # the report's own gather is not part of the epoch's traffic
        comm_times = [r["comm_time"] for r in everyone]
        compute_times = [r["compute_time"] for r in everyone]
        return {"comm_time": mine["comm_time"],
                "compute_time_max": max(compute_times), "compute_time_min": min(compute_times),
                "comm_time_max": max(comm_times), "comm_time_min": min(comm_times),
                "halo_bytes": sum(r["halo_bytes"] for r in everyone),
                "halo_messages": sum(r["halo_messages"] for r in everyone),
                "bytes_total": sum(r["bytes"] for r in everyone),
                "rank_comm_time": comm_times,
                "rank_halo_bytes": [r["halo_bytes"] for r in everyone]}

    def report_lines(self, extra: dict) -> list:
        if not extra:
            return []
        return [f"ranks: compute {1e3 * extra['compute_time_min']:.1f}-{1e3 * extra['compute_time_max']:.1f} ms, "
                f"comm {1e3 * extra['comm_time_min']:.1f}-{1e3 * extra['comm_time_max']:.1f} ms (min-max); "
                f"halo {extra['halo_bytes'] / 2**20:.2f} MiB in {extra['halo_messages']} messages, "
                f"{extra['bytes_total'] / 2**20:.2f} MiB in all"]


def _world_size() -> int:
    import torch.distributed as dist
    return dist.get_world_size() if dist.is_initialized() else 1
