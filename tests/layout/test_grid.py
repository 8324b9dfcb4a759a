"""The grid's vocabulary: a grid string and the default, most cubic factorization of the ranks."""

from gnnmesh.layout import ParallelLayout
from gnnmesh.layout.grid import most_cubic_grid, parse_grid


def test_grid_string_and_default_factorization():
    assert parse_grid(" 2, 1 ,4").dims() == {"x": 2, "y": 1, "z": 4}
    assert ParallelLayout.for_strategy("grid3d", 8).grid.dims() == most_cubic_grid(8).dims() == {"x": 2, "y": 2, "z": 2}
    assert most_cubic_grid(1).dims() == {"x": 1, "y": 1, "z": 1}
    assert most_cubic_grid(4).dims() == {"x": 2, "y": 2, "z": 1}
    assert most_cubic_grid(12).dims() == {"x": 3, "y": 2, "z": 2}
    assert most_cubic_grid(7).dims() == {"x": 7, "y": 1, "z": 1}
