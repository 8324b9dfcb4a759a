"""GAT's attention in one op: ``spmm(z, dropout(softmax_row(leaky_relu(s_dst[i] + s_src[j]))))``.

Where the Triton kernels run (``fused.available``: CUDA with triton installed) the scores,
the row softmax and the weighted sum are one kernel per pass, and neither pass holds a
per-edge tensor of the heads: the forward keeps each row's softmax maximum and sum
(``[N, H]``), and the backward recomputes every weight from them (one gather of ``s_src``
per entry, cheap next to the gather of ``z`` it sits beside), which is most of GAT's memory
on a large graph. Elsewhere it is the composition of ``sddmm``, ``leaky_relu``,
``edge_softmax`` and ``spmm`` it replaces, with the same results to float rounding.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..graph import Adjacency
from . import fused
from .precision import in_float32
from .profile import phase
from .sddmm import sddmm
from .softmax import edge_softmax
from .spmm import spmm


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, adj, z, s_dst, s_src, keep, slope, scale):
        with phase("aggregate"):
            out, row_max, row_sum = fused.attention(adj, z, s_dst, s_src, keep, slope, scale)
            ctx.adj, ctx.slope, ctx.scale = adj, slope, scale
            ctx.save_for_backward(z, s_dst, s_src, keep, out, row_max, row_sum)
            return out

    @staticmethod
    def backward(ctx, grad_out):
        z, s_dst, s_src, keep, out, row_max, row_sum = ctx.saved_tensors
        with phase("aggregate"):
            try:
                grads = fused.attention_backward(ctx.adj, z, s_dst, s_src, keep, ctx.slope, ctx.scale, out,
                                                 row_max, row_sum, grad_out.contiguous())
            except fused.KernelFailed:  # the forward ran, its backward's kernels do not: torch's ops
                with torch.enable_grad():
                    inputs = [t.detach().requires_grad_() for t in (z, s_dst, s_src)]
                    recomputed = _composed(ctx.adj, *inputs, ctx.slope, keep, ctx.scale)
                    grads = torch.autograd.grad(recomputed, inputs, grad_out)
        return (None, *grads, None, None, None)


@in_float32
def attention(adj: Adjacency, z: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor,
              negative_slope: float = 0.2, keep: Optional[torch.Tensor] = None, p: float = 0.0) -> torch.Tensor:
    """``out[i] = sum_j alpha_ij z[j]`` over row ``i``'s entries of ``adj``, ``alpha`` the
    softmax over the row of ``leaky_relu(s_dst[i] + s_src[j], negative_slope)``: ``z``
    ``[N_src, H, F]``, ``s_dst`` ``[N_dst, H]``, ``s_src`` ``[N_src, H]``. ``keep``
    (``[E, H]`` bool) is attention dropout's mask of probability ``p``: dropped weights are
    zero, kept ones scaled by ``1 / (1 - p)``."""
    if z.dim() != 3 or s_dst.shape != (adj.shape[0], z.shape[1]) or s_src.shape != z.shape[:2]:
        raise ValueError(f"attention: z {tuple(z.shape)}, s_dst {tuple(s_dst.shape)}, s_src {tuple(s_src.shape)} "
                         f"do not fit a {adj.shape[0]} x {adj.shape[1]} operator")
    scale = 1.0 / (1.0 - p) if keep is not None else 1.0
    if fused.available(z, s_dst, s_src):
        flags = None if keep is None else keep.to(z.device, torch.uint8).contiguous()
        try:
            return _Attention.apply(adj, z.contiguous(), s_dst.contiguous(), s_src.contiguous(), flags,
                                    float(negative_slope), scale)
        except fused.KernelFailed:
            pass
    return _composed(adj, z, s_dst, s_src, negative_slope, keep, scale)


def _composed(adj, z, s_dst, s_src, negative_slope, keep, scale):
    """The attention of the primitives' own ops (torch's or the compiled CPU kernels)."""
    alpha = edge_softmax(adj, F.leaky_relu(sddmm(adj, s_dst, s_src, "add"), negative_slope))
    if keep is not None:
        alpha = torch.where(keep.to(alpha.device, torch.bool), alpha * scale, 0.0)
    return spmm(adj, z, alpha)
