"""The models' dense ops (linear map, bias, sum, ReLU) with their outputs and gradients on
pooled memory (``buffers``) when pooling is on.

torch allocates every dense output anew, and a fresh ``[N, F]`` tensor faults in each of its
pages when first written: on a million-node graph the layers' linear maps, bias, activation
and their gradients fault in gigabytes per epoch, which takes longer than the products
themselves. Here each op writes into pooled memory (torch's ``out=`` variants) and its
backward does the same, so epochs after the first fault in none.

Every op runs the same torch kernel on the same operands as the plain op it replaces
(``h @ w.t()``, ``z + b``, ``a + b``, ``torch.relu``), forward and backward, so results are
bit-identical to it: a strategy that calls the plain op computes the same numbers. With
pooling off the same ops run on fresh memory; on other devices or dtypes, or under
autocast, the plain op runs.
"""

from __future__ import annotations

import torch

from . import buffers


def applies(*tensors: torch.Tensor) -> bool:
    """Whether these operands take the ops here (CPU floats outside autocast), not torch's."""
    return (not torch.is_autocast_enabled("cpu")
            and all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors)
            and len({t.dtype for t in tensors}) == 1)


def linear(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``h @ weight.t()`` for ``h`` ``[N, in]`` and ``weight`` ``[out, in]``."""
    if h.dim() != 2 or not applies(h, weight):
        return h @ weight.t()
    return _Linear.apply(h, weight)


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b``: two tensors of one shape, or a bias ``b`` ``[F]`` added to every row of ``a``."""
    if not applies(a, b) or not (a.shape == b.shape or (b.dim() == 1 and a.dim() == 2 and a.shape[1] == b.shape[0])):
        return a + b
    return _Add.apply(a, b)


def activation(fn, h: torch.Tensor) -> torch.Tensor:
    """``fn(h)``: ReLU on pooled memory, any other activation as it is."""
    if fn in (torch.relu, torch.nn.functional.relu) and applies(h):
        return _ReLU.apply(h)
    return fn(h)


def _empty_like(t: torch.Tensor) -> torch.Tensor:
    return buffers.empty(t.shape, t.dtype)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight):
        ctx.save_for_backward(h, weight)
        out = buffers.empty((h.shape[0], weight.shape[0]), h.dtype)
        return torch.mm(h, weight.t(), out=out)

    @staticmethod
    def backward(ctx, grad):
        h, weight = ctx.saved_tensors
        grad_h = grad_weight = None
        # the products autograd's own backward of ``h @ weight.t()`` computes, in its order
        if ctx.needs_input_grad[0]:
            grad_h = torch.mm(grad, weight, out=buffers.empty(h.shape, h.dtype))
        if ctx.needs_input_grad[1]:
            grad_weight = grad.t().mm(h)
        return grad_h, grad_weight


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.b_shape = b.shape
        return torch.add(a, b, out=_empty_like(a))

    @staticmethod
    def backward(ctx, grad):
        # a bias's gradient: the rows' sum, as autograd reduces a broadcast operand's
        return grad, grad.sum_to_size(ctx.b_shape) if grad.shape != ctx.b_shape else grad


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        out = torch.clamp_min(h, 0, out=_empty_like(h))  # torch.relu is clamp_min(h, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        out, = ctx.saved_tensors
        return torch.ops.aten.threshold_backward.grad_input(grad, out, 0, grad_input=_empty_like(out))
