"""The graph primitives under mixed precision: they compute in float32.

Under ``torch.autocast`` (``--precision bf16-mixed``) a model's dense products hand the
primitives bfloat16 rows. The compiled kernels, torch's sparse products and the collectives of
the parallel views are written for float32, and a sum over a row's in-edges in bfloat16 would
lose what autocast keeps float32 for; so a primitive widens reduced-precision inputs to float32,
runs with autocast off (torch's sparse product is on autocast's bfloat16 list) and returns the
reduced dtype it was given, as autocast's own ops do: the model stays in the precision autocast
chose, and the gradients flow back in each input's own dtype.
"""

from __future__ import annotations

import functools

import torch

REDUCED = (torch.bfloat16, torch.float16)


def in_float32(fn):
    """``fn`` (a primitive: tensors in, a tensor or a tuple of them out) computing in float32
    when any input is of a reduced precision or autocast is on; its outputs then take the
    reduced dtype of its inputs (float32 where none was reduced). Anything else runs ``fn``
    untouched."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
        reduced = next((t.dtype for t in tensors if t.dtype in REDUCED), None)
        device = tensors[0].device.type if tensors else "cpu"
        if reduced is None and not torch.is_autocast_enabled(device):
            return fn(*args, **kwargs)
        args = tuple(widened(a) for a in args)
        kwargs = {k: widened(v) for k, v in kwargs.items()}
        with torch.autocast(device, enabled=False):
            out = fn(*args, **kwargs)
        if reduced is None:
            return out
        return tuple(t.to(reduced) for t in out) if isinstance(out, tuple) else out.to(reduced)
    return run


def current_autocast(device) -> tuple:
    """The autocast in force on ``device``'s type now, ``(device type, enabled, dtype)``: what a
    backward pass that recomputes a forward (out of core) re-enters with ``autocast_as``."""
    kind = torch.device(device).type
    return kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)


def autocast_as(state: tuple):
    """The autocast context of ``state`` (``current_autocast``'s)."""
    kind, enabled, dtype = state
    return torch.autocast(kind, dtype=dtype, enabled=enabled)


def widened(value):
    """``value`` in float32 if it is a tensor of a reduced precision; anything else as it is."""
    return value.float() if torch.is_tensor(value) and value.dtype in REDUCED else value
