"""What every multi-rank strategy shares: replicated weights whose gradients are summed
over ranks, metrics summed over ranks, and a per-epoch traffic report built from the
``Comm`` counters."""

from __future__ import annotations

import torch

from .. import memory
from ..layout import ParallelLayout
from .strategy import Strategy


class DistributedStrategy(Strategy):
    """Base for strategies whose ranks hold disjoint vertex rows and replicated weights.

    ``reported_phases`` names the traffic phases worth a field of their own in the epoch
    report (``<phase>_bytes``, ``<phase>_messages``, ``rank_<phase>_bytes``)."""

    reported_phases: tuple = ()

    def __init__(self, layout: ParallelLayout, device, comm_dim=None):
        """Talk over ``layout``'s process mesh; ``comm_dim`` names the mesh dimension weights
        and metrics are reduced over (None: the whole world)."""
        self.layout, self.device = layout, torch.device(device)
        self.mesh = layout.mesh(self.device)
        self.comm = self.mesh.comm(comm_dim)
        self.rank, self.world_size = self.comm.rank, self.comm.world_size
        self.coords = layout.coordinates(self.mesh.comm().rank)  # this rank's place on every dimension
        placed = {dim: self.mesh.comm(dim).rank for dim in self.coords}
        if placed != self.coords:  # the mesh and the layout disagree on where ranks sit
            raise RuntimeError(f"the process mesh put this rank at {placed}, its layout at {self.coords}")

    def comms(self) -> list:
        """Every communicator this strategy talks through (their counters make the report)."""
        return [self.comm]

    def all_reduce(self, tensor):
        with self.comm.phase("metrics"):
            return self.comm.all_reduce(tensor)

    def metrics_comm(self):
        return self.comm

    @torch.no_grad()
    def agree_parameters(self, model):
        world = self.mesh.comm()
        if world.world_size == 1:
            return
        with world.phase("setup"):
            for tensor in model.state_dict().values():  # parameters and buffers, in place
                world.broadcast_(tensor, 0)

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

    def take_counters(self) -> dict:
        """This rank's traffic since the last call, summed over its communicators."""
        wait, phases = 0.0, {}
        for comm in self.comms():
            stats = comm.take()
            wait += stats["wait_seconds"]
            for name, c in stats["phases"].items():
                mine = phases.setdefault(name, {"bytes": 0, "messages": 0, "wait": 0.0})
                for key in mine:
                    mine[key] += c.get(key, 0)
        return {"wait_seconds": wait, "phases": phases}

    def reset_counters(self) -> None:
        self.take_counters()

    def rank_figures(self) -> dict:
        """Extra per-rank numbers for the report; summed over ranks (those named ``*_max``:
        the largest)."""
        return {}

    def report(self, epoch_time: float, peaks: dict) -> dict:
        stats = self.take_counters()
        phases = stats["phases"]
        mine = {"comm_time": stats["wait_seconds"], "compute_time": epoch_time - stats["wait_seconds"],
                "bytes": sum(p["bytes"] for p in phases.values()),
                "phases": {k: (v["bytes"], v["messages"], v["wait"]) for k, v in phases.items()},
                "figures": self.rank_figures(), "memory": peaks}
        everyone = self.comm.all_gather_object(mine)
        self.take_counters()  # the report's own gather is not part of the epoch's traffic
        comm_times = [r["comm_time"] for r in everyone]
        compute_times = [r["compute_time"] for r in everyone]
        out = {"comm_time": mine["comm_time"],
               "compute_time_max": max(compute_times), "compute_time_min": min(compute_times),
               "comm_time_max": max(comm_times), "comm_time_min": min(comm_times),
               "bytes_total": sum(r["bytes"] for r in everyone),
               "rank_comm_time": comm_times}
        for phase in self.reported_phases:
            per_rank = [r["phases"].get(phase, (0, 0, 0.0)) for r in everyone]
            out[f"{phase}_bytes"] = sum(p[0] for p in per_rank)
            out[f"{phase}_messages"] = sum(p[1] for p in per_rank)
            out[f"{phase}_wait_max"] = max(p[2] for p in per_rank)  # seconds blocked, slowest rank
            out[f"rank_{phase}_bytes"] = [p[0] for p in per_rank]
        for key in mine["figures"]:
            values = [r["figures"][key] for r in everyone]
            out[key] = max(values) if key.endswith("_max") else sum(values)
        out.update(memory.fields([r["memory"] for r in everyone]))
        return out

    def report_lines(self, extra: dict) -> list:
        if not extra:
            return []
        traffic = ", ".join(f"{p} {extra[p + '_bytes'] / 2**20:.2f} MiB in {extra[p + '_messages']} messages"
                            for p in self.reported_phases)
        return [f"ranks: compute {1e3 * extra['compute_time_min']:.1f}-{1e3 * extra['compute_time_max']:.1f} ms, "
                f"comm {1e3 * extra['comm_time_min']:.1f}-{1e3 * extra['comm_time_max']:.1f} ms (min-max); "
                + (traffic + ", " if traffic else "") + f"{extra['bytes_total'] / 2**20:.2f} MiB in all"]

