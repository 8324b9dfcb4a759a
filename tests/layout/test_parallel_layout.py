"""ParallelLayout: each strategy's layout splits along the degrees its registry entry names, and
no other."""

import pytest

from gnnmesh import strategies
from gnnmesh.errors import ConfigError
from gnnmesh.layout import ParallelLayout


def test_layouts_split_what_the_registry_says():
    for name in strategies.names():
        layout = ParallelLayout.for_strategy(name, 8 if strategies.dims_of(name) else 1)
        assert set(layout.degrees()) == set(strategies.dims_of(name)), name
    with pytest.raises(ConfigError, match="does not split along cols"):
        ParallelLayout(cols=2, strategy="partition")
