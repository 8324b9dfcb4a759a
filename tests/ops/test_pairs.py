"""Pair dot products read in place (``ops.pairs``) against gathering the rows: the same
scores and the same gradient of the table, repeated pairs and self-pairs included."""

import pytest
import torch

from gnnmesh.ops import compiled
from gnnmesh.ops.pairs import pair_dot

pytest.importorskip("numba")


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_pair_dot_matches_gathered_rows(monkeypatch, threads, dtype):
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    torch.manual_seed(0)
    table = torch.randn(50, 7, dtype=dtype)
    a = torch.randint(50, (400,))
    b = torch.randint(50, (400,))
    a[:5] = b[:5]  # self-pairs
    weights = torch.randn(400, dtype=dtype)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # the backward's row blocks, one per thread
    try:
        results = []
        for kernels in (True, False):
            t = table.clone().requires_grad_()
            if kernels:
                scores = pair_dot(t, a, b)
            else:
                with compiled.disabled():
                    scores = pair_dot(t, a, b)
            (scores * weights).sum().backward()
            results.append((scores.detach(), t.grad))
    finally:
        torch.set_num_threads(old_threads)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(results[0][0], results[1][0], atol=tol)
    assert torch.allclose(results[0][1], results[1][1], atol=tol)
    assert results[0][1].abs().sum() > 0


def test_small_inputs_and_other_layouts_take_the_gathered_rows(monkeypatch):
    monkeypatch.setenv("GNNMESH_KERNELS", "auto")  # 3 pairs: below the compiled kernels' size
    table = torch.arange(12.0).view(4, 3).requires_grad_()
    scores = pair_dot(table, torch.tensor([0, 1, 3]), torch.tensor([1, 1, 2]))
    assert scores.grad_fn.name() != "_PairDotBackward"
    assert scores.tolist() == [0 * 3 + 1 * 4 + 2 * 5, 9 + 16 + 25, 9 * 6 + 10 * 7 + 11 * 8]
