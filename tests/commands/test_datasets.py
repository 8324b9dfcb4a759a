"""``gnnmesh datasets``: the listing of known datasets with their sizes."""

from gnnmesh.datasets import load
from tests.helpers import gnnmesh


def test_datasets_lists_sizes(data_root):
    result = gnnmesh("datasets", "--data-root", str(data_root))
    assert result.returncode == 0
    cora = next(line for line in result.stdout.splitlines() if line.startswith("cora"))
    edges = load("cora").num_edges  # the listing counts edges as the loaded Graph does
    assert "2,708" in cora and f"{edges:,}" in cora.split() and "yes" in cora
    assert "rmat" in result.stdout and "sbm" in result.stdout
