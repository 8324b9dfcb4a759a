"""Row-parallel GPU kernels over a CSR structure, written in Triton.

One program owns one output row (of ``A``, or of ``A^T`` through the stored transpose), walks
its entries in blocks of ``BLOCK_E`` in storage order and keeps its sums in registers: no
program writes another's rows, so no kernel needs atomics and every run gives the same bits.
Per-edge data is ``[E, H]`` and vertex data ``[N, H, F]`` (``H`` heads; 1 for plain inputs),
contiguous; ``HP`` and ``FP`` are ``H`` and ``F`` rounded up to powers of two (Triton's
blocks), the padding masked off.

The attention kernels are GAT's ``spmm(z, softmax_row(leaky_relu(s_dst[i] + s_src[j])))``
fused: the forward keeps each row's softmax maximum and sum (``[N, H]``) and writes no
per-edge tensor; the backward recomputes the attention weights from them, so neither pass
holds an ``[E, H]`` tensor of the heads (attention dropout's keep-mask aside, an input).
Kernels call no helper kernels: Triton's interpreter, which tests them on a CPU, pays
milliseconds a call.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def spmm(indptr, indices, values, perm, x, out,
         H: tl.constexpr, F: tl.constexpr, HAS_PERM: tl.constexpr, BLOCK_E: tl.constexpr,
         BLOCK_F: tl.constexpr):
    """``out[r, h, f] = sum_e values[perm[e], h] * x[indices[e], h, f]`` over row ``r``'s
    entries (no ``perm``: ``values[e, h]``). Grid: (rows, H * column blocks of F)."""
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.cdiv(F, BLOCK_F)
    head = tl.program_id(1) // blocks
    f = (tl.program_id(1) % blocks) * BLOCK_F + tl.arange(0, BLOCK_F)
    f_ok = f < F
    lo = tl.load(indptr + row).to(tl.int64)
    hi = tl.load(indptr + row + 1).to(tl.int64)
    acc = tl.zeros([BLOCK_F], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        e_ok = e < hi
        j = tl.load(indices + e, mask=e_ok, other=0).to(tl.int64)
        at = tl.load(perm + e, mask=e_ok, other=0).to(tl.int64) if HAS_PERM else e
        v = tl.load(values + at * H + head, mask=e_ok, other=0.0)
        src = tl.load(x + (j[:, None] * H + head) * F + f[None, :], mask=e_ok[:, None] & f_ok[None, :], other=0.0)
        acc += tl.sum(v[:, None] * src, axis=0)
    tl.store(out + (row * H + head) * F + f, acc.to(out.dtype.element_ty), mask=f_ok)


@triton.jit
def edge_dot(indptr, indices, a, b, out,
             H: tl.constexpr, F: tl.constexpr, HP: tl.constexpr, FP: tl.constexpr, BLOCK_E: tl.constexpr):
    """``out[e, h] = <a[row(e), h], b[indices[e], h]>``. Grid: (rows,)."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, HP)
    f = tl.arange(0, FP)
    hf_ok = (h[:, None] < H) & (f[None, :] < F)
    dst = tl.load(a + (row * H + h[:, None]) * F + f[None, :], mask=hf_ok, other=0.0)
    lo = tl.load(indptr + row).to(tl.int64)
    hi = tl.load(indptr + row + 1).to(tl.int64)
    for start in range(lo, hi, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        e_ok = e < hi
        j = tl.load(indices + e, mask=e_ok, other=0).to(tl.int64)
        src = tl.load(b + (j[:, None, None] * H + h[None, :, None]) * F + f[None, None, :],
                      mask=e_ok[:, None, None] & hf_ok[None, :, :], other=0.0)
        total = tl.sum(src * dst[None, :, :], axis=2)
        tl.store(out + e[:, None] * H + h[None, :], total.to(out.dtype.element_ty),
                 mask=e_ok[:, None] & (h[None, :] < H))


@triton.jit
def attention_forward(indptr, indices, z, s_dst, s_src, keep, out, row_max, row_sum, slope, scale,
                      H: tl.constexpr, F: tl.constexpr, HP: tl.constexpr, FP: tl.constexpr,
                      HAS_KEEP: tl.constexpr, BLOCK_E: tl.constexpr):
    """Row ``i``'s ``out[i, h] = sum_e w[e, h] * z[j, h]``, ``w`` the softmax over the row of
    the logits ``leaky_relu(s_dst[i] + s_src[j])`` (zero on ``keep``'s dropped entries, the
    rest times ``scale``), in one pass over the row: the running maximum rescales the sums
    seen so far when it grows (an online softmax), so ``z``'s rows and the logits are read
    once. Stores the row's maximum and sum of exponentials for the backward."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, HP)
    f = tl.arange(0, FP)
    h_ok = h < H
    hf_ok = h_ok[:, None] & (f[None, :] < F)
    lo = tl.load(indptr + row).to(tl.int64)
    hi = tl.load(indptr + row + 1).to(tl.int64)
    sd = tl.load(s_dst + row * H + h, mask=h_ok, other=0.0)
    top = tl.where(h_ok, float("-inf"), 0.0)
    total = tl.zeros([HP], dtype=tl.float32)
    acc = tl.zeros([HP, FP], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        ok = (e < hi)[:, None] & h_ok[None, :]
        j = tl.load(indices + e, mask=e < hi, other=0).to(tl.int64)
        raw = sd[None, :] + tl.load(s_src + j[:, None] * H + h[None, :], mask=ok, other=0.0)
        # past the row's end -inf, weightless; on the padding heads 0, kept finite and unstored
        x = tl.where(ok, tl.where(raw > 0, raw, raw * slope), tl.where(h_ok, float("-inf"), 0.0)[None, :])
        new_top = tl.maximum(top, tl.max(x, axis=0))  # finite: every block holds an entry
        shrink = tl.exp(top - new_top)
        p = tl.where(ok, tl.exp(x - new_top[None, :]), 0.0)
        w = p
        if HAS_KEEP:
            kept = tl.load(keep + e[:, None] * H + h[None, :], mask=ok, other=0)
            w = tl.where(kept != 0, p * scale, 0.0)
        src = tl.load(z + (j[:, None, None] * H + h[None, :, None]) * F + f[None, None, :],
                      mask=ok[:, :, None] & hf_ok[None, :, :], other=0.0)
        acc = acc * shrink[:, None] + tl.sum(w[:, :, None] * src, axis=0)
        total = total * shrink + tl.sum(p, axis=0)
        top = new_top
    result = acc / tl.where(total > 0, total, 1.0)[:, None]  # an empty row sums nothing: zeros
    tl.store(out + (row * H + h[:, None]) * F + f[None, :], result.to(out.dtype.element_ty), mask=hf_ok)
    tl.store(row_max + row * H + h, top, mask=h_ok)
    tl.store(row_sum + row * H + h, total, mask=h_ok)


# The backward recomputes every entry's weight from its row's maximum and sum, and the
# logit's gradient from the weight: the softmax's backward ``alpha * (grad - t)``, with
# ``grad = <grad_out[i], z[j]>`` (through the dropout) and ``t = <grad_out[i], out[i]>`` (the
# row's sum of ``w * grad``), then the leaky ReLU's. The rows' and the columns' pass write
# this arithmetic out alike (Triton's interpreter calls a nested kernel function slowly).

@triton.jit
def attention_backward_rows(indptr, indices, z, s_dst, s_src, keep, grad_out, out, row_max, row_sum,
                            row_t, grad_s_dst, slope, scale,
                            H: tl.constexpr, F: tl.constexpr, HP: tl.constexpr, FP: tl.constexpr,
                            HAS_KEEP: tl.constexpr, BLOCK_E: tl.constexpr):
    """Row ``i``'s ``t = <grad_out[i], out[i]>`` per head (kept for the columns' pass) and
    ``grad s_dst[i]``, the sum of its entries' logit gradients."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, HP)
    f = tl.arange(0, FP)
    h_ok = h < H
    hf_ok = h_ok[:, None] & (f[None, :] < F)
    lo = tl.load(indptr + row).to(tl.int64)
    hi = tl.load(indptr + row + 1).to(tl.int64)
    at = (row * H + h[:, None]) * F + f[None, :]
    g = tl.load(grad_out + at, mask=hf_ok, other=0.0)
    t = tl.sum(g * tl.load(out + at, mask=hf_ok, other=0.0), axis=1)
    tl.store(row_t + row * H + h, t, mask=h_ok)
    sd = tl.load(s_dst + row * H + h, mask=h_ok, other=0.0)
    top = tl.load(row_max + row * H + h, mask=h_ok, other=0.0)
    total = tl.load(row_sum + row * H + h, mask=h_ok, other=1.0)
    acc = tl.zeros([HP], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        ok = (e < hi)[:, None] & h_ok[None, :]
        j = tl.load(indices + e, mask=e < hi, other=0).to(tl.int64)
        raw = sd[None, :] + tl.load(s_src + j[:, None] * H + h[None, :], mask=ok, other=0.0)
        x = tl.where(raw > 0, raw, raw * slope)
        alpha = tl.exp(x - top[None, :]) / total[None, :]
        src = tl.load(z + (j[:, None, None] * H + h[None, :, None]) * F + f[None, None, :],
                      mask=ok[:, :, None] & hf_ok[None, :, :], other=0.0)
        grad = tl.sum(g[None, :, :] * src, axis=2)
        if HAS_KEEP:
            kept = tl.load(keep + e[:, None] * H + h[None, :], mask=ok, other=0)
            grad = tl.where(kept != 0, grad * scale, 0.0)
        grad_x = alpha * (grad - t[None, :])
        grad_x = tl.where(raw > 0, grad_x, grad_x * slope)
        acc += tl.sum(tl.where(ok, grad_x, 0.0), axis=0)
    tl.store(grad_s_dst + row * H + h, acc.to(grad_s_dst.dtype.element_ty), mask=h_ok)


@triton.jit
def attention_backward_columns(t_indptr, t_indices, perm, z, s_dst, s_src, keep, grad_out, row_max, row_sum,
                               row_t, grad_z, grad_s_src, slope, scale,
                               H: tl.constexpr, F: tl.constexpr, HP: tl.constexpr, FP: tl.constexpr,
                               HAS_KEEP: tl.constexpr, BLOCK_E: tl.constexpr):
    """Column ``j``'s ``grad z[j] = sum_i w[i, j] * grad_out[i]`` and ``grad s_src[j]``, the
    sum of its entries' logit gradients, over the rows of ``A^T`` (its entries in ``A`` at
    ``perm``): the rows' statistics are read, every weight recomputed as the forward did."""
    col = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, HP)
    f = tl.arange(0, FP)
    h_ok = h < H
    hf_ok = h_ok[:, None] & (f[None, :] < F)
    lo = tl.load(t_indptr + col).to(tl.int64)
    hi = tl.load(t_indptr + col + 1).to(tl.int64)
    mine = tl.load(z + (col * H + h[:, None]) * F + f[None, :], mask=hf_ok, other=0.0)
    ss = tl.load(s_src + col * H + h, mask=h_ok, other=0.0)
    acc_z = tl.zeros([HP, FP], dtype=tl.float32)
    acc_s = tl.zeros([HP], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        ok = (e < hi)[:, None] & h_ok[None, :]
        i = tl.load(t_indices + e, mask=e < hi, other=0).to(tl.int64)
        stat = i[:, None] * H + h[None, :]
        raw = tl.load(s_dst + stat, mask=ok, other=0.0) + ss[None, :]
        x = tl.where(raw > 0, raw, raw * slope)
        top = tl.load(row_max + stat, mask=ok, other=0.0)
        total = tl.load(row_sum + stat, mask=ok, other=1.0)
        alpha = tl.where(ok, tl.exp(x - top) / total, 0.0)
        g = tl.load(grad_out + (i[:, None, None] * H + h[None, :, None]) * F + f[None, None, :],
                    mask=ok[:, :, None] & hf_ok[None, :, :], other=0.0)
        grad = tl.sum(g * mine[None, :, :], axis=2)
        w = alpha
        if HAS_KEEP:
            entry = tl.load(perm + e, mask=e < hi, other=0).to(tl.int64)
            kept = tl.load(keep + entry[:, None] * H + h[None, :], mask=ok, other=0)
            grad = tl.where(kept != 0, grad * scale, 0.0)
            w = tl.where(kept != 0, alpha * scale, 0.0)
        grad_x = alpha * (grad - tl.load(row_t + stat, mask=ok, other=0.0))
        acc_s += tl.sum(tl.where(raw > 0, grad_x, grad_x * slope), axis=0)
        acc_z += tl.sum(w[:, :, None] * g, axis=0)
    tl.store(grad_z + (col * H + h[:, None]) * F + f[None, :], acc_z.to(grad_z.dtype.element_ty), mask=hf_ok)
    tl.store(grad_s_src + col * H + h, acc_s.to(grad_s_src.dtype.element_ty), mask=h_ok)
