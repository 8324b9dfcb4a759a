"""A training epoch split by phase: where the time goes besides the sparse kernels.

    from phases import PhaseClock

    clock = PhaseClock()
    with clock:
        step()                      # one training epoch: forward, backward, optimizer step
    print(clock.seconds)            # {"aggregate": ..., "linear": ..., ...}

Phases, each as wall seconds and the kernel (sys) time spent inside them, page faults mostly:

* ``aggregate``: gnnmesh's own ``aggregate`` phase (``gnnmesh.ops.profile``): SpMM, SDDMM,
  edge softmax, forward and backward; for another framework, its torch ops on a sparse
  tensor or on per-edge data (``edge_rows``: rows of a tensor with one row per entry);
* ``linear``: the dense linear maps (torch's matrix products), forward and backward;
* ``elementwise``: every other torch op outside the optimizer: bias, activation, dropout,
  loss, gradient sums of the biases;
* ``optimizer``: the optimizer's step (Adam's update of every parameter);
* ``other``: the rest of the epoch: Python, the autograd engine, zeroing the gradients.

Every torch op is timed where it is dispatched (a ``TorchDispatchMode``), so backward ops
count in the phase of their kind; the few microseconds the clock adds per op go to ``other``.
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._pytree import tree_leaves
from torch.utils._python_dispatch import TorchDispatchMode

PHASES = ("aggregate", "linear", "elementwise", "optimizer", "other")
_LINEAR = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_addmm_activation"}


def _sys() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


class PhaseClock(TorchDispatchMode):
    """Wall and sys seconds per phase of everything run inside ``with clock:``, added up over
    the blocks it is used for (``seconds``, ``sys``; ``epoch`` and ``epoch_sys`` the totals)."""

    def __init__(self, edge_rows=()):
        super().__init__()
        self.edge_rows = set(edge_rows)
        self.seconds: dict = defaultdict(float)
        self.sys: dict = defaultdict(float)
        self.epoch = self.epoch_sys = 0.0
        self._in_step = False

    # -- the optimizer's step, through torch's global step hooks
    def _step_starts(self, *_):
        self._in_step, self._step_start = True, (time.perf_counter(), _sys())

    def _step_ends(self, *_):
        wall, sys = self._step_start
        self.seconds["optimizer"] += time.perf_counter() - wall
        self.sys["optimizer"] += _sys() - sys
        self._in_step = False

    def __enter__(self):
        from gnnmesh.ops import profile
        profile.count_sys["on"] = True
        profile.take()
        self._hooks = (register_optimizer_step_pre_hook(self._step_starts),
                       register_optimizer_step_post_hook(self._step_ends))
        self._start = (time.perf_counter(), _sys())
        return super().__enter__()

    def __exit__(self, *exc):
        from gnnmesh.ops import profile
        out = super().__exit__(*exc)
        wall, sys = self._start
        self.epoch += time.perf_counter() - wall
        self.epoch_sys += _sys() - sys
        for hook in self._hooks:
            hook.remove()
        self.seconds["aggregate"] += profile.take().get("aggregate", 0.0)
        self.sys["aggregate"] += profile.take_sys().get("aggregate", 0.0)
        profile.count_sys["on"] = False
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from gnnmesh.ops import profile
        if self._in_step or profile.active():  # counted whole, by the step's hooks or the phase
            return func(*args, **(kwargs or {}))
        wall, sys = time.perf_counter(), _sys()
        out = func(*args, **(kwargs or {}))
        kind = self._kind(func, args)
        self.seconds[kind] += time.perf_counter() - wall
        self.sys[kind] += _sys() - sys
        return out

    def _kind(self, func, args) -> str:
        tensors = [a for a in tree_leaves(args) if isinstance(a, torch.Tensor)]
        if any(t.layout != torch.strided or (t.dim() and t.shape[0] in self.edge_rows) for t in tensors):
            return "aggregate"
        return "linear" if func.overloadpacket.__name__ in _LINEAR else "elementwise"

    def figures(self, epochs: int = 1) -> dict:
        """``{phase: seconds}`` and ``{phase + " sys": seconds}`` per epoch over ``epochs``
        epochs timed, with ``other`` the epoch's rest and ``epoch``, ``epoch sys`` the totals."""
        seconds = {p: self.seconds.get(p, 0.0) for p in PHASES[:-1]}
        sys = {p: self.sys.get(p, 0.0) for p in PHASES[:-1]}
        seconds["other"] = self.epoch - sum(seconds.values())
        sys["other"] = self.epoch_sys - sum(sys.values())
        out = {p: seconds[p] / epochs for p in PHASES}
        out.update({f"{p} sys": sys[p] / epochs for p in PHASES})
        out.update({"epoch": self.epoch / epochs, "epoch sys": self.epoch_sys / epochs})
        return out
