"""The Triton kernels against the ops' torch implementation, run by Triton's interpreter on the
CPU (``TRITON_INTERPRET=1``, ``GNNMESH_KERNELS=triton``) in a process of their own: the flag
must be set before triton is first imported, or the kernels would compile for a GPU. The
interpreter runs a program at a time in Python, so the graphs are small, with what the
kernels must get right: empty rows and columns, a row of one entry, a row longer than a
block, heads and widths that are not powers of two. And the fallback where triton is absent.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnmesh.ops
from gnnmesh.errors import ConfigError
from gnnmesh.graph import Adjacency
from gnnmesh.ops import compiled, fused

ROOT = Path(__file__).resolve().parents[2]


def graph(n_rows=24, n_cols=20, nnz=90, seed=0) -> Adjacency:
    """Random weighted CSR: every fifth row empty, row 1 of one entry, row 2 longer than a block
    of the kernels (BLOCK_E entries), the last column empty."""
    rng = np.random.default_rng(seed)
    row = rng.choice(np.arange(3, n_rows)[np.arange(3, n_rows) % 5 != 0], nnz)
    col = rng.integers(0, n_cols - 1, nnz)
    long = fused.BLOCK_E + 7
    row = np.concatenate([row, [1], np.full(long, 2)])
    col = np.concatenate([col, [4], rng.integers(0, n_cols - 1, long)])
    return Adjacency.from_coo(row, col, (n_rows, n_cols), values=rng.random(len(row)) + 0.5)


def _grads(fn, inputs):
    """``fn(*inputs)`` and the gradients of a fixed random projection of it."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    return [out.detach(), *torch.autograd.grad((out * weight).sum(), inputs)]


def _assert_as_torch(fn, *inputs):
    """``fn`` and its gradients on the Triton kernels equal the torch implementation's."""
    with compiled.disabled():
        expected = _grads(fn, inputs)
    assert fused.available(*inputs)
    for got, want in zip(_grads(fn, inputs), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def check_spmm_and_edge_dot():
    """One head and two (its values [E, 2]), x narrow and wider than a column block; the
    backward is the transposed product (values read through the entry order) and edge dot."""
    from gnnmesh.ops import sddmm, spmm
    adj = graph(12, 10, 30)
    gen = torch.Generator().manual_seed(0)
    fused.MAX_BLOCK_F = 4  # rows of x split over programs, as rows wider than 128 columns are
    _assert_as_torch(lambda v, x: spmm(adj, x, v), torch.rand(adj.nnz, generator=gen),
                     torch.randn(adj.shape[1], 3, generator=gen))
    _assert_as_torch(lambda v, x: spmm(adj, x, v), torch.rand(adj.nnz, 2, generator=gen),
                     torch.randn(adj.shape[1], 2, 6, generator=gen))
    _assert_as_torch(lambda a, b: sddmm(adj, a, b, "dot"), torch.randn(adj.shape[0], 3, 5, generator=gen),
                     torch.randn(adj.shape[1], 3, 5, generator=gen))


def check_attention():
    """GAT's attention, fused, against the composition it replaces: square and rectangular
    operators, with attention dropout's mask and without."""
    from gnnmesh.ops import attention
    gen = torch.Generator().manual_seed(0)
    for adj, heads, width, dropout in ((graph(20, 20, 40), 1, 4, False), (graph(), 3, 5, True)):
        z = torch.randn(adj.shape[1], heads, width, generator=gen)
        s_dst = torch.randn(adj.shape[0], heads, generator=gen)
        s_src = torch.randn(adj.shape[1], heads, generator=gen)
        keep = torch.rand(adj.nnz, heads, generator=gen) > 0.4 if dropout else None
        _assert_as_torch(lambda z, d, s: attention(adj, z, d, s, 0.1, keep, 0.4), z, s_dst, s_src)


def check_gat_through_the_view():
    """A GAT layer in training (attention dropout on) on the single process's view: fused,
    it draws the same mask as the composed primitives, and gives their result."""
    from gnnmesh.models.gat import GATLayer
    from gnnmesh.view import GraphView
    adj = graph(16, 16, 40)
    torch.manual_seed(0)
    layer = GATLayer(6, 3, heads=2, concat=True, attn_dropout=0.5)
    x = torch.randn(16, 6)

    def run():
        view = GraphView(adj, seed=3)
        view.set_epoch(2)
        out = layer(view, x)
        grads = torch.autograd.grad(out.square().sum(), list(layer.parameters()))
        return [out.detach(), *grads]
    assert GraphView(adj)._attends_locally() and fused.available(x)  # the fused op, against the composition
    with compiled.disabled():
        expected = run()
    for got, want in zip(run(), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


CHECKS = [check_spmm_and_edge_dot, check_attention, check_gat_through_the_view]


def run_checks() -> None:
    """Every check, in this process (one interpreter start for them all: imports are most of
    a check's time)."""
    for check in CHECKS:
        check()


@pytest.mark.slow
def test_the_kernels_interpreted_equal_the_torch_path():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "GNNMESH_KERNELS": "triton",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", "import tests.ops.test_fused as t; t.run_checks()"], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]


def test_they_run_where_asked(monkeypatch):
    cpu = torch.zeros(2)
    monkeypatch.setenv("GNNMESH_KERNELS", "auto")
    assert not fused.available(cpu)  # the CPU has its compiled kernels
    monkeypatch.setenv("GNNMESH_KERNELS", "torch")
    assert not fused.available(cpu)
    monkeypatch.setenv("GNNMESH_KERNELS", "triton")
    assert not fused.available(cpu.double()) and not fused.available()  # float32 only
    assert not fused.available(cpu.bfloat16()) and fused.available(cpu.bfloat16(), widened=True) == \
        fused.available(cpu)  # an op that widens reduced precision first
    monkeypatch.setenv("GNNMESH_KERNELS", "cuda")
    with pytest.raises(ConfigError, match="GNNMESH_KERNELS: 'cuda' is not one of auto, compiled, torch, triton"):
        fused.available(cpu)


def test_without_triton_everything_runs_on_torch(monkeypatch):
    """triton not importable: no kernel is asked for, even under GNNMESH_KERNELS=triton, and
    GAT's attention is the composition of the primitives, silently."""
    from gnnmesh.ops import attention, edge_softmax, sddmm, spmm
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton: ImportError
    monkeypatch.setitem(sys.modules, "gnnmesh.ops._triton", None)
    monkeypatch.delattr(gnnmesh.ops, "_triton", raising=False)  # an earlier import left it on the package
    monkeypatch.setattr(fused, "_module", {})
    monkeypatch.setenv("GNNMESH_KERNELS", "triton")
    adj = graph()
    gen = torch.Generator().manual_seed(0)
    z, s_dst, s_src = (torch.randn(adj.shape[1], 2, 3, generator=gen), torch.randn(adj.shape[0], 2, generator=gen),
                       torch.randn(adj.shape[1], 2, generator=gen))
    assert not fused.available(z)
    alpha = edge_softmax(adj, torch.nn.functional.leaky_relu(sddmm(adj, s_dst, s_src, "add"), 0.2))
    assert torch.equal(attention(adj, z, s_dst, s_src, 0.2), spmm(adj, z, alpha))


class _FailingKernels:
    """Stands in for ``_triton`` on a device the kernels do not compile for: every launch raises."""

    launches = 0

    def __getattr__(self, name):
        return self

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            type(self).launches += 1
            raise RuntimeError("PTX: unsupported target\nmore detail")
        return launch


@pytest.mark.parametrize("backward_only", [False, True])
def test_a_kernel_that_fails_to_launch_falls_back_to_torch_once(monkeypatch, backward_only):
    """Under auto, a kernel that does not compile or launch (a device or driver it was never
    built for) warns once, gives the torch path's results, forward and backward, and the process
    runs torch's ops from then on; under GNNMESH_KERNELS=triton the failure is raised."""
    from gnnmesh.ops import attention, spmm
    adj = graph()
    gen = torch.Generator().manual_seed(0)
    z, s_dst, s_src = (torch.randn(adj.shape[1], 2, 3, generator=gen), torch.randn(adj.shape[0], 2, generator=gen),
                       torch.randn(adj.shape[1], 2, generator=gen))
    values = torch.rand(adj.nnz, 2, generator=gen)
    if backward_only:  # the forward's kernel ran, the backward's do not
        def fn(z, s_dst, s_src, values):
            return attention(adj, z, s_dst, s_src, 0.2) + values.sum()
    else:  # the first launch fails: the attention and the product after it run on torch's ops
        def fn(z, s_dst, s_src, values):
            return attention(adj, z, s_dst, s_src, 0.2) + spmm(adj, z, values)
    with compiled.disabled():
        expected = _grads(fn, (z, s_dst, s_src, values))
    monkeypatch.setenv("GNNMESH_KERNELS", "auto")
    monkeypatch.setattr(fused, "_module", {"kernels": _FailingKernels()})
    monkeypatch.setattr(_FailingKernels, "launches", 0)
    real_available = fused.available
    # the CPU stands in for a CUDA device: the kernels are asked for wherever they have not failed
    monkeypatch.setattr(fused, "available", lambda *t, widened=False: not fused._module.get("failed"))
    if backward_only:
        monkeypatch.setattr(fused, "attention", lambda adj, z, s_dst, s_src, keep, slope, scale:
                            _torch_attention(adj, z, s_dst, s_src, slope))
    with pytest.warns(RuntimeWarning, match=r"Triton kernels do not run here \(RuntimeError: PTX: unsupported target\)"):
        got = _grads(fn, (z, s_dst, s_src, values))
    for g, want in zip(got, expected):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5)
    assert _FailingKernels.launches == 1 and fused._module["failed"]  # one failure, then torch's ops
    monkeypatch.setattr(fused, "available", real_available)
    assert not fused.available(z)
    monkeypatch.setenv("GNNMESH_KERNELS", "triton")
    monkeypatch.setattr(fused, "_module", {"kernels": _FailingKernels()})
    with pytest.raises(RuntimeError, match="PTX"):
        fused.spmm(adj, values, z, False)


def _torch_attention(adj, z, s_dst, s_src, slope):
    """What the fused forward returns, from torch's ops: the output, each row's max and sum."""
    rows, cols = gnnmesh.ops.rows(adj, z.device), gnnmesh.ops.cols(adj, z.device)
    scores = torch.nn.functional.leaky_relu(s_dst[rows] + s_src[cols], slope)
    row_max = torch.full(s_dst.shape, float("-inf")).scatter_reduce(0, rows[:, None].expand_as(scores), scores, "amax")
    exp = (scores - row_max[rows]).exp()
    row_sum = torch.zeros(s_dst.shape).index_add(0, rows, exp)
    alpha = exp / row_sum[rows]
    return torch.zeros(adj.shape[0], *z.shape[1:]).index_add(0, rows, alpha[..., None] * z[cols]), row_max, row_sum
