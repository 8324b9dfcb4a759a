"""How a prediction runs (gnnmesh.predict.run): where its sparse products run."""

import pytest

from gnnmesh.ops import compiled
from gnnmesh.predict.run import _kernels

PARTS = object()  # a parts directory, as _run has it (only whether there is one matters)


@pytest.mark.parametrize("parts,ranks,choice,torch_only", [
    (PARTS, 4, "", True),           # ranks from parts: numba's code would be a large share of each
    (PARTS, 4, "compiled", False),  # unless GNNMESH_KERNELS names a choice
    (PARTS, 4, "auto", False),
    (PARTS, 1, "", False),          # one process: the compiled kernels, as training runs them
    (None, 4, "", False),           # ranks from the whole graph hold it all: as training
])
def test_ranks_from_parts_run_torchs_kernels_unless_told(monkeypatch, parts, ranks, choice, torch_only):
    monkeypatch.setenv("GNNMESH_KERNELS", choice)
    assert not compiled.switched_off()
    with _kernels(parts, ranks):
        assert compiled.switched_off() == torch_only
    assert not compiled.switched_off()
