"""The only module that talks to torch.distributed.

Every collective and point-to-point call goes through a ``Comm``, which counts the bytes
and messages this rank sends, per phase (``halo``, ``grad``, ``metrics``, ...), and the
time it spends waiting on communication. Strategies predict their traffic; tests compare
the prediction with these counters.

The process layout is a named mesh (``Mesh``): the partition strategy is the mesh
``{"rows": P}``; feature-column and 3D strategies are other shapes of the same object.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from .launch import check_job_env, restart_count, world_from_env

# How long a collective may wait for a peer before failing: a dead rank then surfaces as an
# error on the others instead of a hang.
DEFAULT_TIMEOUT_S = 60
# Setup steps (loading a graph, partitioning it) may legitimately keep the other ranks
# waiting far longer; they talk over a separate group with this timeout. A rank that dies
# still fails its peers at once (closed connections are reported immediately).
SETUP_TIMEOUT_S = 4 * 3600
_setup: dict = {}


def world_size() -> int:
    """Ranks in this job (1 before the process group is joined)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def init(device: torch.device, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the process group described by the environment (MASTER_ADDR/PORT, RANK, ...)."""
    if dist.is_initialized():
        return
    backend = "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # NCCL refuses two ranks on one GPU; ranks sharing one talk through gloo instead
        local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        backend = "nccl" if local <= torch.cuda.device_count() else "gloo"
    store = _restart_store(timedelta(seconds=timeout_s))
    if store is None:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    else:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), store=store,
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def join_job(device: torch.device) -> bool:
    """Join the job the environment describes (torchrun's variables: ``torchrun``, ``srun
    torchrun`` or ``gnnmesh train --nproc``) unless this process has joined a process group
    already; what the command line does before it trains, for a script that builds a
    ``Trainer`` under a launcher. Returns whether it joined one now (a job of one rank needs
    none). Several Slurm tasks without torchrun's variables are a ConfigError
    (``launch.check_job_env``)."""
    check_job_env()
    world = world_from_env()
    if dist.is_initialized() or world is None or world[1] == 1:  # a job of one rank is this process alone
        return False
    init(device)
    return True


def _restart_store(timeout: timedelta):
    """In a restart of a torchrun job, the agent's store under a prefix of this restart's own;
    else None (the environment's store). torch's elastic agent keeps one store across
    restarts, where the ranks of the run before left their addresses under the keys the new
    ranks meet on: a rank could read a dead peer's address and fail to connect, or hang."""
    restart = restart_count()
    if not restart or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):
        return None
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timeout)
    return dist.PrefixStore(f"gnnmesh/restart_{restart}", agent)


def local_gpu() -> int:
    """This rank's GPU on its host: its local rank, wrapped over the host's GPUs (ranks share
    one when there are more ranks than GPUs)."""
    return int(os.environ.get("LOCAL_RANK", 0)) % max(torch.cuda.device_count(), 1)


def init_local(rendezvous_file: str, rank: int, world: int, backend: str = "gloo") -> None:
    """Join a process group of ``world`` processes on this machine as rank ``rank``; they meet
    at ``rendezvous_file``, a path none of them holds yet (no port to pick or to collide on).
    For helpers outside a job (the planner's bandwidth probe); ``shutdown`` leaves it."""
    dist.init_process_group(backend, init_method=f"file://{rendezvous_file}", rank=rank, world_size=world)


def setup_comm() -> "Comm":
    """World communicator for long setup steps (see SETUP_TIMEOUT_S); same on every rank."""
    if "comm" not in _setup:
        group = None
        if dist.is_initialized() and dist.get_world_size() > 1:
            group = dist.new_group(backend="gloo", timeout=timedelta(seconds=SETUP_TIMEOUT_S))
        _setup["comm"] = Comm(group)
    return _setup["comm"]


def agreed(fn):
    """``fn()`` on every rank, where bad input may be found on some ranks only (a rank's own
    files): if it raised a GraphError or ConfigError anywhere, every rank raises the lowest
    such rank's error, so that all stop alike and rank 0 can report it."""
    from .errors import ConfigError, GraphError
    result = error = None
    try:
        result = fn()
    except (GraphError, ConfigError) as err:
        error = err
    first = next((e for e in setup_comm().all_gather_object(error) if e is not None), None)
    if first is not None:
        raise first
    return result


def shutdown(clean: bool = False) -> None:
    """Leave the process group. ``clean``: every rank got here normally, so wait for all of
    them first (a rank tearing down while a peer still talks to it can abort that peer)."""
    if dist.is_initialized():
        if clean:
            dist.barrier()
        _setup.clear()
        try:
            dist.destroy_process_group()
        except Exception:  # peers that already stopped (after an error) cannot say goodbye
            pass


@dataclass
class Counter:
    bytes: int = 0
    messages: int = 0
    wait: float = 0.0  # seconds spent blocked on this phase's communication


class _Held:
    """A point-to-point handle that keeps its host buffer alive until waited on, and copies a
    received buffer into its device tensor (``into``) then."""

    def __init__(self, handle, buffer: torch.Tensor, into: Optional[torch.Tensor] = None):
        self.handle, self.buffer, self.into = handle, buffer, into

    def wait(self):
        self.handle.wait()
        if self.into is not None:
            self.into.copy_(self.buffer)


class Comm:
    """Counted communication within one process group (one mesh dimension)."""

    def __init__(self, group=None, device: Optional[torch.device] = None):
        self.group = group
        self.rank = dist.get_rank(group) if dist.is_initialized() else 0
        self.world_size = dist.get_world_size(group) if dist.is_initialized() else 1
        self.device = device or torch.device("cpu")
        self.counters: dict[str, Counter] = defaultdict(Counter)
        self.wait_seconds = 0.0
        self._phase = "default"

    # -- accounting --------------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str):
        previous, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = previous

    def _count(self, nbytes: int, messages: int = 1) -> None:
        counter = self.counters[self._phase]
        counter.bytes += int(nbytes)
        counter.messages += messages

    @contextmanager
    def _waiting(self):
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self.wait_seconds += spent
            self.counters[self._phase].wait += spent

    def take(self) -> dict:
        """Counters and wait time since the last call, then reset."""
        out = {"wait_seconds": self.wait_seconds,
               "phases": {k: {"bytes": c.bytes, "messages": c.messages, "wait": c.wait}
                          for k, c in self.counters.items()}}
        self.counters.clear()
        self.wait_seconds = 0.0
        return out

    def global_rank(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    # -- point to point ------------------------------------------------------------------------
    def isend(self, tensor: torch.Tensor, dst: int):
        """Non-blocking send; ``dst`` is a rank within this group. Returns a handle to wait on."""
        self._count(tensor.numel() * tensor.element_size())
        if self._through_host(tensor):
            tensor = tensor.cpu()
        return _Held(dist.isend(tensor.contiguous(), self.global_rank(dst), group=self.group), tensor)

    def irecv(self, tensor: torch.Tensor, src: int):
        if self._through_host(tensor):
            staged = torch.empty(tensor.shape, dtype=tensor.dtype)
            return _Held(dist.irecv(staged, self.global_rank(src), group=self.group), staged, into=tensor)
        return dist.irecv(tensor, self.global_rank(src), group=self.group)

    def _through_host(self, tensor: torch.Tensor) -> bool:
        """Whether a point-to-point message of ``tensor`` goes through host memory: gloo (the
        backend of ranks that share a GPU) sends from host memory only."""
        return tensor.device.type == "cuda" and dist.get_backend(self.group) == "gloo"

    def wait(self, handles) -> None:
        with self._waiting():
            for handle in handles:
                if handle is not None:
                    handle.wait()

    # -- collectives ---------------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over the group, in place. Counts this rank's payload once per call."""
        if self.world_size == 1:
            return tensor
        self._count(tensor.numel() * tensor.element_size())
        moved = tensor.to(self.device)
        with self._waiting():
            dist.all_reduce(moved, group=self.group)
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def all_to_all(self, send: torch.Tensor, send_counts: list, recv_counts: list, async_op: bool = False):
        """Exchange slices of a flat tensor: ``send_counts[r]`` elements go to rank r, and
        ``recv_counts[r]`` arrive from it, in rank order. Only elements that leave this rank
        are counted. Returns the received tensor, or (handle, tensor) with ``async_op``."""
        recv = send.new_empty(sum(recv_counts))
        if self.world_size == 1:
            recv.copy_(send)
            return (None, recv) if async_op else recv
        off_rank = [n for r, n in enumerate(send_counts) if r != self.rank]
        self._count(sum(off_rank) * send.element_size(), messages=sum(1 for n in off_rank if n))
        handle = dist.all_to_all_single(recv, send.contiguous(), list(map(int, recv_counts)),
                                        list(map(int, send_counts)), group=self.group, async_op=True)
        if async_op:
            return handle, recv
        self.wait([handle])
        return recv

    def all_reduce_async(self, tensor: torch.Tensor):
        """Start a sum over the group of ``tensor`` (in place; it must be on this comm's
        device). Returns a handle for ``wait`` (None when there is nothing to send). Counted
        like ``all_reduce``."""
        if self.world_size == 1 or tensor.numel() == 0:
            return None
        self._count(tensor.numel() * tensor.element_size())
        return dist.all_reduce(tensor, group=self.group, async_op=True)

    def all_gather(self, tensor: torch.Tensor, sizes: Optional[list] = None, dim: int = 0) -> torch.Tensor:
        """Every rank's ``tensor`` concatenated along ``dim`` in rank order. ``sizes[r]`` is rank
        r's length along ``dim`` (default: all equal); the other dims must agree. gloo gathers
        equal shapes only, so uneven pieces travel padded to the longest, and this rank's
        padded piece is what is counted."""
        if self.world_size == 1:
            return tensor
        sizes = [int(n) for n in sizes] if sizes is not None else [tensor.shape[dim]] * self.world_size
        piece = _pad(tensor.movedim(dim, 0), max(sizes)).to(self.device).contiguous()
        if piece.numel() == 0:
            return tensor.new_empty((sum(sizes),) + tuple(piece.shape[1:])).movedim(0, dim)
        pieces = [torch.empty_like(piece) for _ in sizes]
        self._count(all_gather_bytes(sizes, _row_elements(piece), piece.element_size()))
        with self._waiting():
            dist.all_gather(pieces, piece, group=self.group)
        out = torch.cat([p[:n] for p, n in zip(pieces, sizes)]).movedim(0, dim)
        return out.to(tensor.device)

    def reduce_scatter(self, tensor: torch.Tensor, sizes: list, dim: int = 0) -> torch.Tensor:
        """This rank's piece of the sum over the group of ``tensor``, which is cut along ``dim``
        into pieces of ``sizes`` (rank order). Pieces travel padded to the longest; the whole
        padded input is counted."""
        sizes = [int(n) for n in sizes]
        if self.world_size == 1:
            return tensor
        moved = tensor.movedim(dim, 0).to(self.device)
        chunks = [_pad(c, max(sizes)).contiguous() for c in moved.split(sizes)]
        out = torch.empty_like(chunks[0])
        if out.numel():
            self._count(reduce_scatter_bytes(sizes, _row_elements(out), out.element_size()))
            with self._waiting():
                dist.reduce_scatter(out, chunks, group=self.group)
        return out[:sizes[self.rank]].movedim(0, dim).to(tensor.device)

    def all_gather_object(self, obj) -> list:
        if self.world_size == 1:
            return [obj]
        out = [None] * self.world_size
        with self._waiting():
            dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        if self.world_size == 1:
            return tensor
        if self.rank == src:
            self._count(tensor.numel() * tensor.element_size())
        moved = tensor.to(self.device)
        with self._waiting():
            dist.broadcast(moved, self.global_rank(src), group=self.group)
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def broadcast_object(self, obj, src: int = 0):
        if self.world_size == 1:
            return obj
        box = [obj]
        with self._waiting():
            dist.broadcast_object_list(box, self.global_rank(src), group=self.group)
        return box[0]

    def barrier(self) -> None:
        if self.world_size > 1:
            with self._waiting():
                dist.barrier(group=self.group)


def all_gather_bytes(sizes: list, row_elements: int, element_size: int = 4) -> int:
    """What ``Comm.all_gather`` counts on each rank for pieces of ``sizes`` rows (rank order)
    of ``row_elements`` elements each: its piece padded to the longest; nothing on one rank."""
    return max(sizes) * row_elements * element_size if len(sizes) > 1 else 0


def reduce_scatter_bytes(sizes: list, row_elements: int, element_size: int = 4) -> int:
    """What ``Comm.reduce_scatter`` counts on each rank: its whole input, every piece padded
    to the longest; nothing on one rank."""
    return len(sizes) * all_gather_bytes(sizes, row_elements, element_size)


def _row_elements(tensor: torch.Tensor) -> int:
    return tensor[0].numel() if tensor.shape[0] else 0


def _pad(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """``tensor`` with zero rows appended up to ``rows`` rows along dim 0."""
    if tensor.shape[0] == rows:
        return tensor
    return torch.cat([tensor, tensor.new_zeros((rows - tensor.shape[0],) + tuple(tensor.shape[1:]))])


class Mesh:
    """Named parallel dimensions, e.g. ``Mesh({"rows": 4})`` or ``Mesh({"x": 2, "y": 2, "z": 2})``.

    Validates that the sizes multiply to the world size and gives a counted ``Comm`` per
    dimension (backed by torch's DeviceMesh when the world has more than one rank)."""

    def __init__(self, dims: dict, device: Optional[torch.device] = None):
        self.dims = dict(dims)
        self.device = device or torch.device("cpu")
        size = 1
        for name, n in self.dims.items():
            if n < 1:
                raise ValueError(f"mesh dimension '{name}' must be >= 1, got {n}")
            size *= n
        world = world_size()
        if size != world:
            shape = " x ".join(f"{k}={v}" for k, v in self.dims.items())
            raise ValueError(f"mesh {shape} has {size} ranks but the job has {world}")
        self._comms: dict = {}
        self._mesh = None
        if world > 1:
            from torch.distributed.device_mesh import init_device_mesh
            self._mesh = init_device_mesh(self.device.type, tuple(self.dims.values()),
                                          mesh_dim_names=tuple(self.dims))

    def comm(self, dim: Optional[str] = None) -> Comm:
        """Communicator over one named dimension (or the whole world with ``dim=None``)."""
        if dim not in self._comms:
            if dim is not None and dim not in self.dims:
                raise ValueError(f"no mesh dimension '{dim}'; have {', '.join(self.dims)}")
            group = None
            if self._mesh is not None and dim is not None and len(self.dims) > 1:
                group = self._mesh.get_group(dim)
            self._comms[dim] = Comm(group, self.device)
        return self._comms[dim]
