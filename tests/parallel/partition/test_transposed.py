"""A rank's backward products taken from the operator's rows, its transpose never built
(gnnmesh.parallel.partition.transposed)."""

import pytest
import torch

from gnnmesh.ops import compiled
from gnnmesh.ops.spmm import multiply
from gnnmesh.parallel.partition.transposed import by_rows, multiply_transposed

from tests.parallel.partition.test_halo import _locals


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("heads", [None, 2])
def test_the_product_from_the_rows_is_the_transposes_bit_for_bit(monkeypatch, threads, heads):
    """Owned and halo parts of every rank (int32 column ids), plain and multi-head rows, one
    task or several: the numbers multiplying by the stored transpose gives, and no transpose
    kept."""
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _, local in _locals("gcn"):
            for part in (local.inner, local.outer):
                assert part.indices.dtype == torch.int32
                shape = (part.shape[0],) + ((5,) if heads is None else (heads, 5))
                g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
                values = part.values if heads is None else torch.rand(part.nnz, heads)
                assert by_rows(part, g)
                got = multiply_transposed(part, values, g)
                assert "t" not in part._structure_cache()  # nothing of A^T built
                assert torch.equal(got, multiply(part, values, g, transpose=True))
    finally:
        torch.set_num_threads(before)


def test_elsewhere_the_stored_transpose_multiplies(monkeypatch):
    monkeypatch.setenv("GNNMESH_KERNELS", "torch")
    _, local = next(_locals("gcn"))
    g = torch.randn(local.inner.shape[0], 4)
    assert not by_rows(local.inner, g)
    assert torch.equal(multiply_transposed(local.inner, local.inner.values, g),
                       multiply(local.inner, local.inner.values, g, transpose=True))
    with compiled.disabled():
        assert not by_rows(local.inner, g)
